#!/usr/bin/env bash
# The one-command PAR pipeline over seeds, one core, the seeds in turn:
#   seeds.sh RUNS_DIR NAME_PREFIX [base_model.sh flags...]
# runs `./base_model.sh --pipeline --seed=s --model_dir=RUNS_DIR/NAME_PREFIX<s> [flags]`
# (console log RUNS_DIR/NAME_PREFIX<s>.console.log) for each seed of SEEDS (default
# "0 1 2") pinned to CORE (default 0) (per_seed.sh); then
#   python -m tools.pipeline_seeds RUNS_DIR/NAME_PREFIX --seeds=0,1,2 --out=...
# writes the rows of seeds.json. Run from the project root after ./create_tfrecords.sh.
set -euo pipefail
runs="${1:?give RUNS_DIR NAME_PREFIX [flags...]}"
prefix="${2:?give RUNS_DIR NAME_PREFIX [flags...]}"
shift 2
exec "$(dirname "$0")/per_seed.sh" "$runs" "$prefix" --pipeline "$@"
