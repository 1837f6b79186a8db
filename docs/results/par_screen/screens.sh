#!/usr/bin/env bash
# The screens of par_screen.md: each candidate the pipeline's searches derived (aaafaf,
# aaaaff, aaaaaf) trained from scratch for one epoch (2,726 steps) at seeds 0-2, one core.
#   SCHEDULE=prefix: the first epoch of the 20-epoch retrain's own schedule (warm-up 1,000,
#     cosine to 1e-5 at step 54,520: --decay_steps=54520 with the warm-up uncapped), so that
#     the pick's screen could go on into its retrain; valid at step 2,500 and at the end.
#   SCHEDULE=own (default): the fast recipe (Adam 2e-3, dropout 0) with its own schedule
#     over that one epoch, as par_frontier's 3-epoch runs, decayed at its end.
# Run from the project root after ./create_tfrecords.sh; CORE picks the core (default 1),
# SEEDS and ARCHS the runs.
set -euo pipefail
core="${CORE:-1}"
seeds="${SEEDS:-0 1 2}"
archs="${ARCHS:-aaafaf aaaaff aaaaaf}"
schedule="${SCHEDULE:-own}"
mkdir -p runs/par_screen
for s in $seeds; do
  for a in $archs; do
    if [[ "$schedule" == prefix ]]; then
      name=${a}_s$s
      flags=(--max_steps=2726 --decay_steps=54520 --warmup_fraction=1 --eval_interval=2500
             --checkpoint_interval=2500)
    else
      name=own_${a}_s$s
      flags=(--recipe=fast --epochs=1 --eval_interval=2726 --checkpoint_interval=2726)
    fi
    taskset -c "$core" ./base_model.sh --model_dir=runs/par_screen/$name --seed=$s \
      --architecture=$a --arch_warmup_steps=0 "${flags[@]}" \
      >> runs/par_screen/$name.console.log 2>&1
  done
done
