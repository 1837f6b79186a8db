#!/usr/bin/env bash
# The searches of par_beta_decay.md: the pipeline's search stage (./base_model.sh
# --pipeline's flags without --then_retrain) with beta-decay regularisation of the
# architecture (--arch_beta_decay=LAMBDA, default 25), seeds SEEDS (default 0 1 2), one
# core (CORE, default 0). Run from the project root after ./create_tfrecords.sh.
set -euo pipefail
core="${CORE:-0}"
seeds="${SEEDS:-0 1 2}"
lambda="${LAMBDA:-25}"
mkdir -p runs/beta_decay_wt2
for s in $seeds; do
  taskset -c "$core" ./base_model.sh --model_dir=runs/beta_decay_wt2/l${lambda}_s$s --seed=$s \
    --epochs=2 --warmup_steps=1000 --arch_warmup_steps=2000 --eval_interval=2500 \
    --checkpoint_interval=2500 --freeze_threshold=0 --stop_rule=stable --stop_window=1000 \
    --arch_beta_decay="$lambda" \
    >> runs/beta_decay_wt2/l${lambda}_s$s.console.log 2>&1
done
