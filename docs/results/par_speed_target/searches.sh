#!/usr/bin/env bash
# The searches of par_speed_target.md: the pipeline's search stage (./base_model.sh
# --pipeline's flags without --then_retrain) asking for 1.3x Transformer-XL's speed
# (--search_speed_target=1.3), seeds 0-2 (SEEDS), one core (CORE, default 0).
# Run from the project root after ./create_tfrecords.sh.
set -euo pipefail
core="${CORE:-0}"
seeds="${SEEDS:-0 1 2}"
target="${TARGET:-1.3}"
mkdir -p runs/speed_target_wt2
for s in $seeds; do
  taskset -c "$core" ./base_model.sh --model_dir=runs/speed_target_wt2/t${target}_s$s --seed=$s \
    --epochs=2 --warmup_steps=1000 --arch_warmup_steps=2000 --eval_interval=2500 \
    --checkpoint_interval=2500 --freeze_threshold=0 --stop_rule=stable --stop_window=1000 \
    --search_speed_target="$target" \
    >> runs/speed_target_wt2/t${target}_s$s.console.log 2>&1
done
