#!/usr/bin/env bash
# The screens of par_screen.md: each candidate the pipeline's searches derived (aaafaf,
# aaaaff, aaaaaf) trained for the first epoch (2,726 steps) of the 20-epoch retrain's own
# schedule (warm-up 1,000, cosine to 1e-5 at step 54,520: --decay_steps=54520 with the
# warm-up uncapped), at retrain seeds 0-2, one core. Valid is evaluated at step 2,500 (where
# the 20-epoch runs were evaluated first) and at the end. Run from the project root after
# ./create_tfrecords.sh; CORE picks the core (default 1), SEEDS and ARCHS the runs.
set -euo pipefail
core="${CORE:-1}"
seeds="${SEEDS:-0 1 2}"
archs="${ARCHS:-aaafaf aaaaff aaaaaf}"
mkdir -p runs/par_screen
for s in $seeds; do
  for a in $archs; do
    taskset -c "$core" ./base_model.sh --model_dir=runs/par_screen/${a}_s$s --seed=$s \
      --architecture=$a --arch_warmup_steps=0 --max_steps=2726 --decay_steps=54520 \
      --warmup_fraction=1 --eval_interval=2500 --checkpoint_interval=2500 \
      >> runs/par_screen/${a}_s$s.console.log 2>&1
  done
done
