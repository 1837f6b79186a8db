#!/usr/bin/env bash
# Muon's step speed before and after the fused Adam part and --muon_ns_bfloat16=1, against
# Adam, aaafaf in mixed bfloat16 on both cores, 600 steps each, twice in alternating order.
# OLD is a checkout of the code before the change (git worktree add --detach OLD 8e6716a,
# with data/ and .venv linked); run from the project root with nothing else running.
set -euo pipefail
old="${OLD:?give OLD=<checkout before the change>}"
out="${OUT:-/tmp/muon_speed}"
mkdir -p "$out"
run() {  # name dir flags...
  local name=$1 dir=$2; shift 2
  (cd "$dir" && ./base_model.sh --model_dir="$out/$name" --architecture=aaafaf \
    --arch_warmup_steps=0 --learning_rate=2e-3 --precision=mixed_bfloat16 --max_steps=600 \
    --eval_interval=100000 --checkpoint_interval=100000 --sample_tokens=0 --overwrite "$@" \
    > "$out/$name.console.log" 2>&1)
}
here=$(pwd)
for round in 1 2; do
  order=(muon_before muon_fused muon_fused_nsbf16 adam)
  [[ $round -eq 2 ]] && order=(adam muon_fused_nsbf16 muon_fused muon_before)
  for name in "${order[@]}"; do
    case $name in
      muon_before) run "${name}_r$round" "$old" --optimizer=muon ;;
      muon_fused) run "${name}_r$round" "$here" --optimizer=muon ;;
      muon_fused_nsbf16) run "${name}_r$round" "$here" --optimizer=muon --muon_ns_bfloat16=1 ;;
      adam) run "${name}_r$round" "$here" --optimizer=adam ;;
    esac
    echo "$name round $round done"
  done
done
