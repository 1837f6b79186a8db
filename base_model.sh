#!/usr/bin/env bash
# The default PAR supernet search on WikiText-2 (README, quick start).
#
#   ./create_tfrecords.sh && ./base_model.sh [train.py flags...]
#
# Data: data/wikitext2 as create_tfrecords.sh builds it by default (12k
# sentencepiece vocabulary, batch 32, segments of 32 tokens). Model: the
# wt2_base preset (d_model 128, 4 heads, d_ffn 512, 6 stochastic blocks,
# memory 16, adaptive softmax). Adam with linear warmup and cosine decay,
# Gumbel-softmax temperature annealed from 1.0 to 0.1, 20 epochs.
# Extra flags are passed through and win, e.g. --max_steps=500 for a quick
# look or --strategy=mirrored on a multi-GPU machine. Running it again resumes
# from the last checkpoint in runs/wt2_base_supernet.
#
# Afterwards, train the derived architecture from scratch (PAR's second stage):
#   ./base_model.sh --model_dir=runs/wt2_base_derived \
#       --architecture=runs/wt2_base_supernet --arch_warmup_steps=0
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
exec "${PYTHON:-python3}" train.py \
  --preset=wt2_base \
  --data_dir=data/wikitext2 \
  --model_dir=runs/wt2_base_supernet \
  --epochs=20 \
  --optimizer=adam \
  --learning_rate=1e-3 \
  --lr_schedule=cosine \
  --warmup_steps=1000 \
  --min_lr=1e-5 \
  --clip_norm=0.25 \
  --tau_start=1.0 \
  --tau_end=0.1 \
  --tau_schedule=exponential \
  --arch_warmup_steps=2000 \
  --arch_learning_rate=1e-2 \
  --arch_weight_decay=5e-4 \
  --eval_interval=2500 \
  --checkpoint_interval=2500 \
  --log_interval=100 \
  "$@"
