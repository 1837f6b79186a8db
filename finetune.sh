#!/usr/bin/env bash
# Fine-tune a trained model on your own text, in one command (README, docs/training.md).
#
#   ./finetune.sh --from=MODEL --text=FILE [--output=OUT.keras] [--name=NAME] [train.py flags...]
#
# MODEL is a .keras package (e.g. pretrained/wt2_base.keras) or a run directory (its
# best checkpoint); FILE a UTF-8 text. The text is built with MODEL's own tokenizer and
# id order into data/NAME (valid and test are split off its end, --split_fraction), a run
# in runs/NAME starts from MODEL's weights and config (train.py --init_weights) with the
# fine-tuning recipe (--recipe=finetune: Adam at a constant 1e-3, valid every 200 steps,
# the best checkpoint kept, early stop after 3 evaluations without a new best), and the
# best checkpoint is exported to OUT.keras (default runs/NAME.keras), a package carrying
# MODEL's tokenizer. NAME defaults to <model>_<text> (file names without extension).
#
# Extra flags are train.py's and win over the recipe's length (e.g. --max_steps=2000,
# --eval_interval=100, --early_stop=5); a model flag may only repeat MODEL's. Running it
# again resumes from the run's last checkpoint, or says it had finished.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The user's relative paths mean the directory the command was run from, as in
# every other script; the defaults (runs/, data/) are the repository's.
CALLER="$PWD"
cd "$ROOT"
source tools/require_python.sh
require_python

source tools/caller_paths.sh
caller_args "from text output data_dir model_dir logdir export init_weights flagfile" "$@"

exec "${PYTHON:-python3}" finetune.py ${CALLER_ARGS[@]+"${CALLER_ARGS[@]}"}
