#!/usr/bin/env bash
# The searches of par_beta_decay.md: the pipeline's search stage with beta-decay
# regularisation of the architecture (--arch_beta_decay=LAMBDA, default 25), seeds SEEDS
# (default 0 1 2), core CORE (default 0). Run from the project root after
# ./create_tfrecords.sh.
set -euo pipefail
lambda="${LAMBDA:-25}"
exec docs/results/par_pipeline/search_stage.sh runs/beta_decay_wt2 "l${lambda}_s" \
  --arch_beta_decay="$lambda"
