#!/usr/bin/env bash
# The searches of par_screen.md for the pipeline's seeds 1 and 2 with three searches each
# (pipeline seed p searches at seeds 3p, 3p+1, 3p+2; seed 0's are par_settle's): the
# pipeline's search stage (./base_model.sh --pipeline's flags without --then_retrain), one
# core. Run from the project root after ./create_tfrecords.sh; CORE picks the core (default
# 1), SEEDS the searches.
set -euo pipefail
core="${CORE:-1}"
seeds="${SEEDS:-3 4 5 6 7 8}"
mkdir -p runs/par_screen
for s in $seeds; do
  taskset -c "$core" ./base_model.sh --model_dir=runs/par_screen/search_s$s --seed=$s \
    --epochs=2 --warmup_steps=1000 --arch_warmup_steps=2000 --eval_interval=2500 \
    --checkpoint_interval=2500 --freeze_threshold=0 --stop_rule=stable --stop_window=1000 \
    >> runs/par_screen/search_s$s.console.log 2>&1
done
