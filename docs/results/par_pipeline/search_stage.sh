#!/usr/bin/env bash
# The pipeline's search stage (./base_model.sh --pipeline's flags without --then_retrain),
# one run per seed, one core: the searches of par_settle, par_warmup, par_screen,
# par_speed_target and par_beta_decay, each of which adds its own flags.
#   search_stage.sh RUNS_DIR NAME_PREFIX [train.py flags...]
# trains seed s in RUNS_DIR/NAME_PREFIX<s> (console log beside it, .console.log), the given
# flags after the stage's own (later flags win). SEEDS (default "0 1 2") and CORE (default
# 0) choose the seeds and the core (per_seed.sh). Run from the project root after
# ./create_tfrecords.sh.
set -euo pipefail
runs="${1:?give RUNS_DIR NAME_PREFIX [flags...]}"
prefix="${2:?give RUNS_DIR NAME_PREFIX [flags...]}"
shift 2
exec "$(dirname "$0")/per_seed.sh" "$runs" "$prefix" \
  --epochs=2 --warmup_steps=1000 --arch_warmup_steps=2000 --eval_interval=2500 \
  --checkpoint_interval=2500 --freeze_threshold=0 --stop_rule=stable --stop_window=1000 "$@"
