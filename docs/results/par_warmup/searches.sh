#!/usr/bin/env bash
# The three WikiText-2 searches of par_warmup.md: the pipeline's search stage (as in
# par_settle/searches.sh) with a longer architecture warm-up, half the 2-epoch run
# (--arch_warmup_fraction=0.5, --arch_warmup_steps=2726), so that every candidate of every
# block trains alike for 2,726 steps before the architecture moves. Seeds 0-2, one core.
# Run from the project root after ./create_tfrecords.sh; CORE picks the core (default 0).
set -euo pipefail
exec docs/results/par_pipeline/search_stage.sh runs/warmup_wt2 s --arch_warmup_steps=2726 \
  --arch_warmup_fraction=0.5
