#!/usr/bin/env bash
# The byte-level runs of docs/results/baselines.md ("Byte level"), one after the other on
# core 1, from the project root (data/wt2_bytes16: the byte build, batch 16 x 128, as
# build_data.py --tokenizer=byte --batch_size=16 --seq_len=128 makes it). Equal tokens: 2,500
# steps of 16 x 128 = 2,048 bytes for all three models. Each driver's console goes to the
# driver_*.log beside its runs.
set -euo pipefail
STEPS=2500
OUT=docs/results/baselines/bytes
mkdir -p $OUT
B="taskset -c 1 python -m experiments.baselines --data_dir=data/wt2_bytes16 --max_steps=$STEPS"
# SHA-RNN and LSTM: train.py with the sha_rnn_small / lstm_small recipe at width 128, 3 blocks,
# Boom 512 (--d_model, --num_layers, --d_ffn below are the driver's defaults, spelled out).
$B --models=sha_rnn --d_model=128 --num_layers=3 --d_ffn=512 --out_dir=$OUT \
  > $OUT/driver_sha_rnn.log 2>&1
$B --models=lstm --d_model=128 --num_layers=3 --d_ffn=512 --out_dir=$OUT \
  > $OUT/driver_lstm.log 2>&1
# The plain decoder of the word-level comparison (d_model 128, 3 blocks, 4 heads, inner 512)
# over the 256 bytes: windows of 128, 16 a step; 10% warm-up, cosine decay.
$B --models=decoder --tokens_per_step=2048 --context=128 --stride=64 \
  --warmup_steps=$(( STEPS / 10 )) --out_dir=$OUT > $OUT/driver_decoder.log 2>&1
# Equal time: the decoder gets the SHA-RNN's seconds in training steps (the slowest of the
# three; the decoder is the faster of the two).
STEPS_T=$(python - <<'PY'
from experiments.compare_families import training_seconds
from training.training_log import read_training_log
out = "docs/results/baselines/bytes"
sha = training_seconds(read_training_log(f"{out}/sha_rnn/training_log.log"), 2048)
dec = training_seconds(read_training_log(f"{out}/decoder/training_log.log"), 2048)
print(round(2500 * sha / dec))
PY
)
mkdir -p docs/results/baselines/bytes_equal_time
taskset -c 1 python -m experiments.baselines --data_dir=data/wt2_bytes16 --max_steps=$STEPS_T \
  --models=decoder --tokens_per_step=2048 --context=128 --stride=64 \
  --warmup_steps=$(( (STEPS_T + 5) / 10 )) --out_dir=docs/results/baselines/bytes_equal_time \
  > docs/results/baselines/bytes_equal_time/driver_decoder.log 2>&1
python -m experiments.baselines --summarize=docs/results/baselines
