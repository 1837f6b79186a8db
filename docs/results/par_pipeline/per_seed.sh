#!/usr/bin/env bash
# One base_model.sh run per seed, one core, the seeds in turn: what search_stage.sh (the
# pipeline's search stage) and seeds.sh (the whole pipeline) share.
#   per_seed.sh RUNS_DIR NAME_PREFIX [base_model.sh flags...]
# trains seed s in RUNS_DIR/NAME_PREFIX<s> (console log beside it, .console.log) with
# `./base_model.sh --model_dir=... --seed=s [flags]`. SEEDS (default "0 1 2") and CORE
# (default 0) choose the seeds and the core. Run from the project root after
# ./create_tfrecords.sh.
set -euo pipefail
runs="${1:?give RUNS_DIR NAME_PREFIX [flags...]}"
prefix="${2:?give RUNS_DIR NAME_PREFIX [flags...]}"
shift 2
core="${CORE:-0}"
seeds="${SEEDS:-0 1 2}"
mkdir -p "$runs"
for s in $seeds; do
  taskset -c "$core" ./base_model.sh --model_dir="$runs/$prefix$s" --seed="$s" \
    "$@" >> "$runs/$prefix$s.console.log" 2>&1
done
