#!/usr/bin/env bash
# Thread and replica settings for the record's step: aaafaf, Muon (update scale 0.15,
# Newton-Schulz in bfloat16), learning rate 2e-3, on both cores, 600 steps each, in mixed
# bfloat16 and float32, twice in alternating order. Run from the project root with nothing
# else running; logs go to OUT (default /tmp/replica_speed).
set -euo pipefail
out="${OUT:-/tmp/replica_speed}"
mkdir -p "$out"
run() {  # name flags...
  local name=$1; shift
  ./base_model.sh --model_dir="$out/$name" --architecture=aaafaf --arch_warmup_steps=0 \
    --learning_rate=2e-3 --optimizer=muon --muon_rms_rate=0.15 --muon_ns_bfloat16=1 \
    --max_steps=600 --eval_interval=100000 --checkpoint_interval=100000 --sample_tokens=0 \
    --overwrite "$@" > "$out/$name.console.log" 2>&1
}
settings=(default intra1_inter2 mirrored2 mirrored2_intra1_inter2)
flags() {
  case $1 in
    default) ;;
    intra1_inter2) echo --intra_op_threads=1 --inter_op_threads=2 ;;
    mirrored2) echo --strategy=mirrored --num_cpu_replicas=2 ;;
    mirrored2_intra1_inter2)
      echo --strategy=mirrored --num_cpu_replicas=2 --intra_op_threads=1 --inter_op_threads=2 ;;
  esac
}
for round in 1 2; do
  order=("${settings[@]}")
  [[ $round -eq 2 ]] && order=(mirrored2_intra1_inter2 mirrored2 intra1_inter2 default)
  for precision in mixed_bfloat16 float32; do
    for name in "${order[@]}"; do
      # shellcheck disable=SC2046
      run "${name}_${precision}_r$round" --precision=$precision $(flags "$name")
      echo "$name $precision round $round done"
    done
  done
done
