#!/usr/bin/env bash
# The default PAR supernet search on WikiText-2 (README, quick start).
#
#   ./create_tfrecords.sh && ./base_model.sh [--quick] [train.py flags...]
#
# Data: data/wikitext2 as create_tfrecords.sh builds it by default (12k
# sentencepiece vocabulary, batch 32, segments of 32 tokens). Model: the
# wt2_base preset (d_model 128, 4 heads, d_ffn 512, 6 stochastic blocks,
# memory 16, adaptive softmax). Adam with linear warmup and cosine decay,
# Gumbel-softmax temperature annealed from 1.0 to 0.1, 20 epochs (54,520
# steps), into runs/wt2_base_supernet.
#
# --quick: a short look that still searches, in its own run directory
# runs/wt2_base_quick: 3,000 steps with the schedules planned for those 3,000
# (warm-ups of 300 and 600 steps), evaluations and checkpoints every 500.
# It never touches the 20-epoch run.
#
# Extra flags are passed through and win, e.g. --strategy=mirrored on a
# multi-GPU machine. Running it again resumes from the last checkpoint of its
# run directory; a run resumed with a smaller --max_steps/--epochs keeps the
# schedules of its first start and says it was cut short when it ends.
#
# --recipe=NAME (training/setup/recipes.py, docs/training.md#recipes): the weights'
# optimisation and the run's length come from the recipe instead of the seed
# recipe's flags below (Adam 1e-3, cosine to 1e-5, clip 0.25, 20 epochs);
# with --pipeline the derived network trains the recipe's length.
# --retrain_recipe=NAME (with --pipeline): the derived network alone trains with
# that recipe and its length; the search keeps the seed recipe (or --recipe, which
# then applies to both stages).
#
# Afterwards, train the derived architecture from scratch (PAR's second stage):
#   ./base_model.sh --model_dir=runs/wt2_base_derived \
#       --architecture=runs/wt2_base_supernet --arch_warmup_steps=0
#
# --pipeline: the whole method in one command (docs/results/par_pipeline.md):
# a short search (2 epochs, its own schedules) into runs/wt2_base_pipeline that
# ends once every block's choice is stable (--stop_rule=stable; no progressive
# freezing, which changed the 20-epoch search's outcome), then the derived
# network trained from scratch with the muon recipe (--retrain_recipe=muon, 10
# epochs; the search keeps the seed recipe) in runs/wt2_base_pipeline_retrain,
# evaluated on test and exported to runs/wt2_base_pipeline.keras (with another
# --model_dir=DIR: DIR.keras, unless --export says where). Running it again
# resumes the stage it was in. --retrain_recipe=seed trains it as before that
# default (20 epochs of the seed recipe), as does a run directory started then.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The user's relative paths mean the directory the command was run from, as in
# every other script; the defaults below are the repository's (runs/, data/).
CALLER="$PWD"
cd "$ROOT"
source tools/require_python.sh
require_python

source tools/caller_paths.sh
PATH_FLAGS="data_dir model_dir logdir export init_from flagfile architecture"

quick=0
pipeline=0
recipe=0
retrain_recipe=0
architecture=""
model_dir=""
export_given=0
args=()
pending=""
for arg in "$@"; do
  if [[ -n "$pending" ]]; then  # the value of a spaced --flag value
    [[ "$pending" == architecture ]] && architecture="$arg"
    [[ "$pending" == model_dir ]] && model_dir="$(from_caller "$pending" "$arg")"
    args+=("$(from_caller "$pending" "$arg")")
    pending=""
    continue
  fi
  name="${arg#--}"
  name="${name%%=*}"
  if [[ "$arg" == "--quick" ]]; then
    quick=1
    continue
  elif [[ "$arg" == "--pipeline" ]]; then
    pipeline=1
    continue
  elif [[ "$arg" == "--recipe" || "$arg" == "--retrain_recipe" ]]; then
    echo "error: give the recipe as $arg=NAME (one word), e.g. $arg=muon" >&2
    exit 1
  fi
  [[ "$arg" == --recipe=* ]] && recipe=1
  [[ "$arg" == --retrain_recipe=* ]] && retrain_recipe=1
  [[ "$arg" == --architecture=* ]] && architecture="${arg#*=}"
  [[ "$arg" == --export || "$arg" == --export=* ]] && export_given=1
  if [[ " $PATH_FLAGS " == *" $name "* && "$arg" == --* ]]; then
    if [[ "$arg" == *=* ]]; then
      arg="--$name=$(from_caller "$name" "${arg#*=}")"
      [[ "$name" == model_dir ]] && model_dir="${arg#*=}"
    else
      pending="$name"
    fi
  fi
  args+=("$arg")
done

if [[ $quick -eq 1 && $pipeline -eq 1 ]]; then
  echo "error: --quick and --pipeline are two different runs: give one of them" >&2
  exit 1
elif [[ $pipeline -eq 1 && -n "$architecture" ]]; then
  echo "error: --pipeline searches the architecture, then trains the one it finds: drop" \
    "--architecture=$architecture to search, or train that architecture without --pipeline" \
    "(./base_model.sh --architecture=$architecture --arch_warmup_steps=0" \
    "--model_dir=runs/NAME)" >&2
  exit 1
elif [[ $pipeline -eq 1 ]]; then
  mkdir -p runs
  length=(--model_dir=runs/wt2_base_pipeline --epochs=2 --warmup_steps=1000
          --arch_warmup_steps=2000 --eval_interval=2500 --checkpoint_interval=2500
          --freeze_threshold=0 --stop_rule=stable --stop_window=1000 --then_retrain
          --export=runs/wt2_base_pipeline.keras)
  # A pipeline in another run directory exports beside it (<model_dir>.keras), not over
  # the default pipeline's package.
  if [[ -n "$model_dir" && $export_given -eq 0 ]]; then
    length+=(--export="${model_dir%/}.keras")
  fi
  # The derived network's recipe and length: muon's 10 epochs (the search keeps the seed
  # recipe, with which it derives the better networks: docs/results/speedrun.md), unless
  # --recipe or --retrain_recipe says otherwise. A run directory started before that
  # default (its config.json names no retrain recipe) finishes as it started: the seed
  # recipe's 20 epochs.
  if [[ $recipe -eq 0 && $retrain_recipe -eq 0 ]]; then
    run_dir="${model_dir:-runs/wt2_base_pipeline}"
    if [[ -f "$run_dir/config.json" ]] \
        && ! grep -Eq '"retrain_recipe": *"[^"]' "$run_dir/config.json"; then
      echo "note: $run_dir was started before --pipeline trained the derived network with" \
        "--retrain_recipe=muon: it finishes as it started, with the seed recipe's 20 epochs" \
        "(--retrain_recipe=muon with another --model_dir for the new default)" >&2
      length+=(--retrain_epochs=20)
    else
      length+=(--retrain_recipe=muon)
    fi
  fi
elif [[ $quick -eq 1 ]]; then
  length=(--model_dir=runs/wt2_base_quick --max_steps=3000 --warmup_steps=300
          --arch_warmup_steps=600 --eval_interval=500 --checkpoint_interval=500)
else
  length=(--model_dir=runs/wt2_base_supernet --arch_warmup_steps=2000 --eval_interval=2500
          --checkpoint_interval=2500)
  [[ $recipe -eq 1 ]] || length+=(--epochs=20 --warmup_steps=1000)
fi

# The weights' optimisation: the seed project's recipe (training/setup/recipes.py,
# `seed`) unless a --recipe=NAME is given, whose values then apply instead.
optimisation=()
[[ $recipe -eq 1 ]] || optimisation=(--optimizer=adam --learning_rate=1e-3
                                     --lr_schedule=cosine --min_lr=1e-5 --clip_norm=0.25)

exec "${PYTHON:-python3}" train.py \
  --preset=wt2_base \
  --data_dir=data/wikitext2 \
  ${optimisation[@]+"${optimisation[@]}"} \
  --tau_start=1.0 \
  --tau_end=0.1 \
  --tau_schedule=exponential \
  --arch_learning_rate=1e-2 \
  --arch_weight_decay=5e-4 \
  --log_interval=100 \
  "${length[@]}" \
  ${args[@]+"${args[@]}"}
