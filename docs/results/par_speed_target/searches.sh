#!/usr/bin/env bash
# The searches of par_speed_target.md: the pipeline's search stage asking for TARGET
# (default 1.3) times Transformer-XL's speed (--search_speed_target), seeds SEEDS (default
# 0 1 2), core CORE (default 0). Run from the project root after ./create_tfrecords.sh.
set -euo pipefail
target="${TARGET:-1.3}"
exec docs/results/par_pipeline/search_stage.sh runs/speed_target_wt2 "t${target}_s" \
  --search_speed_target="$target"
