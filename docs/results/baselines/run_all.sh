#!/usr/bin/env bash
# The runs of docs/results/baselines.md, one after the other on core 1, from the project
# root (data/wikitext2 as ./create_tfrecords.sh builds it). Each driver's console went to
# the driver_*.log beside its runs.
set -euo pipefail
B="taskset -c 1 python -m experiments.baselines --data_dir=data/wikitext2"
EQ=docs/results/baselines/equal_tokens
$B --models=transformer_xl --out_dir=$EQ
$B --models=decoder --out_dir=$EQ
# Equal time: the decoder gets the Transformer-XL's seconds in training steps.
STEPS=$(python - <<'PY'
from experiments.compare_families import training_seconds
from training.training_log import read_training_log
eq = "docs/results/baselines/equal_tokens"
txl = training_seconds(read_training_log(f"{eq}/transformer_xl/training_log.log"), 1024)
dec = training_seconds(read_training_log(f"{eq}/decoder/training_log.log"), 1024)
print(round(3000 * txl / dec))
PY
)
$B --models=decoder --max_steps=$STEPS --warmup_steps=$(( (STEPS + 5) / 10 )) \
  --out_dir=docs/results/baselines/equal_time
$B --models=par --out_dir=$EQ
python -m experiments.baselines --summarize=docs/results/baselines
