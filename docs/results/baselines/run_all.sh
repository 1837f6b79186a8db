#!/usr/bin/env bash
# issue 32 runs, back to back on core 1 (starts when /work/scratch/core1_free exists).
set -uo pipefail
cd /work/wt_h32base
while [ ! -e /work/scratch/core1_free ]; do sleep 15; done
echo "core 1 free at $(date -u)"
B="taskset -c 1 python -m experiments.baselines --data_dir=data/wikitext2"
EQ=docs/results/baselines/equal_tokens
LOGS=/work/scratch/h32
echo "start transformer_xl $(date -u)"
$B --models=transformer_xl --out_dir=$EQ > $LOGS/driver_transformer_xl.log 2>&1
echo "start decoder $(date -u)"
$B --models=decoder --out_dir=$EQ > $LOGS/driver_decoder.log 2>&1
STEPS=$(python3 - <<'PY'
import statistics
from training.training_log import read_training_log
from experiments.compare_families import training_seconds
eq = "docs/results/baselines/equal_tokens"
txl = training_seconds(read_training_log(f"{eq}/transformer_xl/training_log.log"), 1024)
dec = training_seconds(read_training_log(f"{eq}/decoder/training_log.log"), 1024)
print(round(3000 * txl / dec))
PY
)
echo "equal time decoder steps $STEPS $(date -u)"
WARM=$(( (STEPS + 5) / 10 ))
$B --models=decoder --max_steps=$STEPS --warmup_steps=$WARM --out_dir=docs/results/baselines/equal_time > $LOGS/driver_decoder_equal_time.log 2>&1
echo "start par $(date -u)"
$B --models=par --out_dir=$EQ > $LOGS/driver_par.log 2>&1
echo "done $(date -u)"
