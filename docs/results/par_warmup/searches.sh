#!/usr/bin/env bash
# The three WikiText-2 searches of par_warmup.md: the pipeline's search stage (as in
# par_settle/searches.sh) with a longer architecture warm-up, half the 2-epoch run
# (--arch_warmup_fraction=0.5, --arch_warmup_steps=2726), so that every candidate of every
# block trains alike for 2,726 steps before the architecture moves. Seeds 0-2, one core.
# Run from the project root after ./create_tfrecords.sh; CORE picks the core (default 0).
set -euo pipefail
core="${CORE:-0}"
seeds="${SEEDS:-0 1 2}"
mkdir -p runs/warmup_wt2
for s in $seeds; do
  taskset -c "$core" ./base_model.sh --model_dir=runs/warmup_wt2/s$s --seed=$s --epochs=2 \
    --warmup_steps=1000 --arch_warmup_steps=2726 --arch_warmup_fraction=0.5 \
    --eval_interval=2500 --checkpoint_interval=2500 \
    --freeze_threshold=0 --stop_rule=stable --stop_window=1000 \
    >> runs/warmup_wt2/s$s.console.log 2>&1
done
