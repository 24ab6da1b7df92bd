#!/usr/bin/env bash
# Tensor parallelism on two GPUs (label gpu): examples/mlp_tp.json compiled with te-compile --tp 2
# runs one rank per GPU over NCCL (te-run --tp 2), and for every recipe
#   - each output is within the recipe's bound of the CPU reference running both ranks, and 100
#     replays are bit-identical (te-run --verify-cpu);
#   - the TP=2 output is within the recipe's bound of the TP=1 plan's on one GPU;
# outputs with and without the overlap of collectives and GEMMs are the same bytes; and a bf16
# and an fp8-current training step's outputs and weight-gradient shards match the reference's.
# Errors:
# --tp that is not the plan's (exit 2), NCCL missing (exit 7, naming the library).
#   bash tests/gpu/tensor_parallel_gpu.sh TE_COMPILE TE_RUN OUT_DIR
# Exits 77 (skipped) without two CUDA devices. NCCL: libnccl.so.2 on the loader's path, or
# $TEC_NCCL_LIBRARY; else the nvidia-nccl wheel of the python3 on PATH, if it has one.
set -uo pipefail
compile=$1 run=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
graph="$here/../../examples/mlp_tp.json"
mkdir -p "$out"
source "$here/wheel_libraries.sh"
"$compile" "$graph" --tp 2 --shape T=64 --recipe bf16 -q -o "$out/probe.teplan" || exit 1
"$run" "$out/probe.teplan" --iterations 1 --warmup 0 > "$out/probe.log" 2>&1
probe_rc=$?
if grep -qE "no CUDA device|this machine has [01] GPU" "$out/probe.log"; then
  echo "SKIPPED: $(cat "$out/probe.log")"
  exit 77
fi
[ $probe_rc = 0 ] || { cat "$out/probe.log"; echo "FAIL: the probe run failed (exit $probe_rc)"; exit 1; }
failed=0
fail() { echo "FAIL: $*"; failed=1; }

for recipe in bf16 fp8-current fp8-delayed fp8-block mxfp8 nvfp4; do
  for T in 64 256; do
    name="$recipe.T$T"
    "$compile" "$graph" --tp 2 --shape T=$T --recipe $recipe -q -o "$out/$name.tp2.teplan" || { fail "$name: te-compile --tp 2"; continue; }
    "$compile" "$graph" --tp 1 --shape T=$T --recipe $recipe -q -o "$out/$name.tp1.teplan" || { fail "$name: te-compile --tp 1"; continue; }
    "$run" "$out/$name.tp2.teplan" --tp 2 --verify-cpu --iterations 20 --warmup 2 --save-outputs "$out/$name.tp2" \
      > "$out/$name.tp2.log" 2>&1 || { cat "$out/$name.tp2.log"; fail "$name: te-run --tp 2 --verify-cpu"; continue; }
    grep -E "^  0 |replays|verify:" "$out/$name.tp2.log" | sed "s/^/$name: /"
    "$run" "$out/$name.tp1.teplan" --iterations 1 --warmup 0 --save-outputs "$out/$name.tp1" > "$out/$name.tp1.log" 2>&1 ||
      { cat "$out/$name.tp1.log"; fail "$name: te-run on one GPU"; continue; }
    python3 - "$out/$name.tp2/y.npy" "$out/$name.tp1/y.npy" "$recipe" "$name" <<'PY' || fail "$name: TP=2 against TP=1"
import sys, numpy as np
tp2, tp1 = np.load(sys.argv[1]).astype(np.float64), np.load(sys.argv[2]).astype(np.float64)
bound = {"bf16": 0.01, "nvfp4": 0.15}.get(sys.argv[3], 0.05)
rel = np.linalg.norm(tp2 - tp1) / np.linalg.norm(tp1)
print(f"{sys.argv[4]}: y of TP=2 against TP=1 on one GPU: rel {rel:.3e} (bound {bound})")
sys.exit(0 if np.isfinite(rel) and rel <= bound else 1)
PY
  done
done

# With the overlap (te-compile --tp-overlap on: collectives beside the GEMMs' row blocks on a
# second stream; auto leaves GEMMs this small serial) the outputs are the same bytes: the row
# blocks are the same rows, each reduction the same sum of two.
for recipe in bf16 fp8-current; do
  name="$recipe.T256"
  "$compile" "$graph" --tp 2 --shape T=256 --recipe $recipe --tp-overlap on -q -o "$out/$name.overlap.teplan" &&
    "$run" "$out/$name.overlap.teplan" --tp 2 --verify-cpu --iterations 2 --warmup 0 --save-outputs "$out/$name.overlap" \
      > "$out/$name.overlap.log" 2>&1 || { cat "$out/$name.overlap.log"; fail "$name: --tp-overlap on"; continue; }
  grep -E "replays|verify:" "$out/$name.overlap.log" | sed "s/^/$name --tp-overlap on: /"
  python3 - "$out/$name.overlap/y.npy" "$out/$name.tp2/y.npy" "$name" <<'PY' || fail "$name: overlapped and serial outputs differ"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
same = a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
print(f"{sys.argv[3]}: y with --tp-overlap on against without: {'bit-identical' if same else 'DIFFERENT'}")
sys.exit(0 if same else 1)
PY
done

# A training step: the backward's collectives (the all-gather's reduce-scatter and back).
for recipe in bf16 fp8-current; do
  "$compile" "$graph" --tp 2 --shape T=64 --recipe $recipe --mode train -q -o "$out/train.$recipe.teplan" || fail "train $recipe: te-compile"
  "$run" "$out/train.$recipe.teplan" --tp 2 --verify-cpu --verify-steps 2 --iterations 5 --warmup 1 > "$out/train.$recipe.log" 2>&1 ||
    { cat "$out/train.$recipe.log"; fail "train $recipe: te-run --tp 2 --verify-cpu"; }
  grep -E "FAIL|verify:|^  1 " "$out/train.$recipe.log" | sed "s/^/train $recipe: /"
done

# Errors: a --tp that is not the plan's, and NCCL missing.
"$run" "$out/probe.teplan" --tp 4 > "$out/wrong_tp.log" 2>&1
rc=$?
{ [ $rc = 2 ] && grep -q "compiled for 2 rank" "$out/wrong_tp.log"; } || { cat "$out/wrong_tp.log"; fail "--tp 4 on a TP=2 plan: exit $rc"; }
TEC_NCCL_LIBRARY=/nonexistent/libnccl.so.2 "$run" "$out/probe.teplan" --iterations 1 > "$out/no_nccl.log" 2>&1
rc=$?
{ [ $rc = 7 ] && grep -q "/nonexistent/libnccl.so.2" "$out/no_nccl.log"; } || { cat "$out/no_nccl.log"; fail "NCCL missing: exit $rc"; }
[ $failed = 0 ] && echo "tensor parallel on 2 GPUs: PASS" || echo "tensor parallel on 2 GPUs: FAIL"
exit $failed
