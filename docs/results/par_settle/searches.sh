#!/usr/bin/env bash
# The three short WikiText-2 searches of par_settle.md: the pipeline's search stage
# (./base_model.sh --pipeline's flags without --then_retrain), seeds 0-2, one core.
# Run from the project root after ./create_tfrecords.sh.
for s in 0 1 2; do
  taskset -c 0 ./base_model.sh --model_dir=runs/settle_wt2/s$s --seed=$s --epochs=2 \
    --warmup_steps=1000 --arch_warmup_steps=2000 --eval_interval=2500 --checkpoint_interval=2500 \
    --freeze_threshold=0 --stop_rule=stable --stop_window=1000 \
    >> runs/settle_wt2/s$s.console.log 2>&1
done
python -m experiments.settle --runs=runs/settle_wt2/s0,runs/settle_wt2/s1,runs/settle_wt2/s2 \
  --extra=afafaf,aaafff --out=runs/settle_wt2/settle.json
