#!/usr/bin/env bash
# examples/train on the GPU (label gpu): the loss falls as on the CPU reference, and at every
# printed step the GPU's loss is within the recipe's bound (0.15 relative, fp8-current, README
# "Training") of the CPU's; both runs restore their halfway checkpoint bit-identically.
#   bash tests/gpu/train_example.sh TE_COMPILE TRAIN_EXAMPLE OUT_DIR
# Exits 77 (skipped) without a CUDA device.
set -uo pipefail
compile=$1 example=$2 out=$3
mkdir -p "$out"
"$compile" "$(dirname "$0")/../../examples/mlp_tiny.json" --mode train --optimizer adamw --lr 3e-3 --shape T=128 -q \
  -o "$out/train.teplan" || exit 1
"$example" "$out/train.teplan" --backend gpu > "$out/gpu.log" 2>&1
gpu_rc=$?
if [ $gpu_rc = 7 ] && grep -q "no CUDA device" "$out/gpu.log"; then
  echo "SKIPPED: $(cat "$out/gpu.log")"
  exit 77
fi
"$example" "$out/train.teplan" --backend cpu > "$out/cpu.log" 2>&1 || { cat "$out/cpu.log"; echo "CPU run failed"; exit 1; }
cat "$out/gpu.log"
[ $gpu_rc = 0 ] || { echo "GPU run failed (exit $gpu_rc)"; exit 1; }
paste <(grep -E "^step" "$out/gpu.log") <(grep -E "^step" "$out/cpu.log") | awk '
  { gpu = $4; cpu = $8; rel = (gpu - cpu) / cpu; if (rel < 0) rel = -rel
    printf "step %4d  loss gpu %.6f cpu %.6f  |gpu-cpu|/cpu %.2e\n", $2, gpu, cpu, rel
    if (rel > 0.15 || $2 != $6) bad = 1; n++ }
  END { if (n < 5 || bad) { print "FAIL: losses differ past 0.15 or steps missing"; exit 1 } print "GPU and CPU losses agree within 0.15" }'
