#!/usr/bin/env bash
# compute-sanitizer's four tools on every example plan (run on the GPU machine):
#   bash tests/gpu/sanitize.sh BUILD_DIR OUT_DIR
# Compiles every example model - examples/mlp_tiny.json under every recipe, swiglu_mlp.json,
# mlp.json (its T=16 profile), moe_tiny.json (bf16, fp8-current, fp8-delayed), train plans (mlp_tiny with AdamW, swiglu_mlp (fp8-delayed, mxfp8, nvfp4), mlp.json T=16,
# moe_tiny under bf16, fp8-current, fp8-delayed, fp8-block, mxfp8 and nvfp4),
# llama_layer_small.json and the corpus's Hugging Face layer (rope kernels, cuDNN's attention) and
# the ONNX models in examples/onnx - and the general ops
# (tests/gpu/general_ops.json), an fp16 and an fp32 export of the corpus (fp16 GEMMs, fp32
# staging of MXFP8's dequantized GEMM) and a static Q/DQ model (fp8-static's dequantize path
# and epilogue kernel, built by tests/onnx/ort_crosscheck.py), runs each plan with te-run
# (2 graph replays) under memcheck (with leak check), racecheck, initcheck and synccheck, and
# parses each tool's summary line. Exits 1 if any tool reports an error or prints no summary.
#
# One exception, printed as such: racecheck reports hazards inside cuBLASLt's Hopper GEMM
# kernels (nvjet_sm90_*) that PyTorch's own _scaled_mm and bf16 matmul show too, with no tec
# code in the process. The script runs that witness (tests/gpu/cublaslt_racecheck_witness.py) first;
# racecheck errors of a plan that all lie in cuBLASLt's kernels are counted as upstream only
# when the witness reproduced errors in cuBLASLt's kernels in the same run. Any error in a tec
# kernel (all are named tec_*), or in cuBLASLt without a reproducing witness, fails.
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
source "$(cd "$(dirname "$0")" && pwd)/wheel_libraries.sh"  # cuDNN for the attention plans
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
failed=0 upstream=0

# The kernels a sanitizer log names in its reports, one per line.
kernels_of() {
  grep -oE "(access|Thread \([0-9,]+\)) at [^+<( ]+|^=========     at (void )?[^+<( ]+" "$1" | sed -E 's/.* at (void )?//' | sort -u
}

witness_log="$out/cublaslt_witness.racecheck.log" witness_kernels=""
if python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2> /dev/null; then
  "$sanitizer" --tool racecheck --error-exitcode 0 python3 tests/gpu/cublaslt_racecheck_witness.py > "$witness_log" 2>&1
  witness_kernels=$(kernels_of "$witness_log" | grep -v "^tec_" | paste -sd, -)
  echo "library witness (PyTorch _scaled_mm, bf16 matmul and cuDNN SDPA, no tec code): racecheck" \
       "$(grep -oE "RACECHECK SUMMARY: .*" "$witness_log" | tail -1) in ${witness_kernels:-no kernel}"
else
  echo "library witness skipped: no PyTorch with CUDA; every racecheck error counts"
fi
static_model="$out/static_per_channel.onnx"
python3 -c "import sys, numpy; sys.path.insert(0, 'tests/onnx'); import ort_crosscheck as c; \
open('$static_model', 'wb').write(c.static_mlp_model(numpy.random.default_rng(1), 'channel').SerializeToString())" ||
  { echo "could not build $static_model"; failed=1; }
printf "%-40s %-10s %s\n" plan tool errors
# model file : recipe ("-": the model's own) : extra te-compile arguments
for entry in moe_tiny.json:bf16 moe_tiny.json:fp8-current moe_tiny.json:fp8-delayed mlp_tiny.json:bf16 mlp_tiny.json:fp8-current mlp_tiny.json:fp8-delayed mlp_tiny.json:fp8-block \
             mlp_tiny.json:mxfp8 mlp_tiny.json:nvfp4 swiglu_mlp.json:fp8-delayed "mlp.json:fp8-delayed:--shape T=16" \
             onnx/gpt_mlp.onnx:- onnx/gpt_mlp_opset13_torchscript.onnx:- onnx/llama_mlp.onnx:- onnx/llama_mlp_opset18.onnx:- \
             tests/gpu/general_ops.json:fp8-current tests/onnx/corpus/llama_mlp_hf.fp16.dynamo18.2d.onnx:fp8-delayed \
             tests/onnx/corpus/gpt_mlp.fp32.dynamo18.3d.onnx:mxfp8 "$static_model:-" \
             "mlp_tiny.json:fp8-current:--mode train --optimizer adamw" "mlp_tiny.json:bf16:--mode train" \
             "swiglu_mlp.json:fp8-delayed:--mode train" "mlp.json:fp8-current:--mode train --shape T=16" \
             "moe_tiny.json:bf16:--mode train" "moe_tiny.json:fp8-current:--mode train" "moe_tiny.json:fp8-delayed:--mode train" \
             "moe_tiny.json:fp8-block:--mode train" "moe_tiny.json:mxfp8:--mode train" "swiglu_mlp.json:mxfp8:--mode train" "swiglu_mlp.json:nvfp4:--mode train" "moe_tiny.json:nvfp4:--mode train" \
             "llama_layer_small.json:bf16:--shape T=128" "llama_layer_small.json:fp8-current:--shape T=128" \
             tests/onnx/corpus/hf_llama_layer.bf16.legacy18.3d.onnx:bf16; do
  IFS=: read -r file recipe compile_extra <<< "$entry"
  name=$(basename "${file%.*}").${recipe/#-/default}
  [[ $compile_extra == *"--mode train"* ]] && name=$name.train
  plan="$out/$name.teplan"
  model="examples/$file"
  [[ $file == tests/* || $file == /* ]] && model=$file
  args=(-o "$plan" -q)
  [ "$recipe" != - ] && args+=(--recipe "$recipe")
  [ -n "$compile_extra" ] && read -ra more <<< "$compile_extra" && args+=("${more[@]}")
  "$build/cli/te-compile" "$model" "${args[@]}" || { echo "te-compile failed: $entry"; failed=1; continue; }
  for tool in memcheck racecheck initcheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    # cuDNN's SDPA kernels hold more cuda::barrier objects than synccheck tracks by default: at 64
    # the tool overflows and the kernel faults under it (measured on the H100, 2026-11-26).
    [ "$tool" = synccheck ] && extra=(--num-cuda-barriers 256)
    log="$out/$name.$tool.log"
    "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 0 "$build/cli/te-run" "$plan" --iterations 2 --warmup 0 > "$log" 2>&1
    # memcheck, initcheck, synccheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK
    # SUMMARY: H hazards displayed (N errors, W warnings)".
    errors=$(grep -oE "ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: .*\(([0-9]+) error" "$log" | tail -1 |
             grep -oE "[0-9]+ error" | grep -oE "[0-9]+")
    if [ -z "$errors" ]; then errors="no summary"; failed=1; elif [ "$errors" != 0 ]; then
      kernels=$(kernels_of "$log")
      if [ "$tool" = racecheck ] && [ -n "$witness_kernels" ] && [ -n "$kernels" ] && ! grep -q "^tec_" <<< "$kernels"; then
        upstream=$((upstream + 1))
        errors="$errors upstream, in a library: $(head -4 <<< "$kernels" | paste -sd, -)"
      else
        failed=1
        errors="$errors in $(head -4 <<< "$kernels" | paste -sd, -)"
      fi
    fi
    printf "%-40s %-10s %s\n" "$name" "$tool" "$errors"
  done
done
if [ $failed != 0 ]; then echo "compute-sanitizer: FAILED (logs in $out)"
elif [ $upstream != 0 ]; then
  echo "compute-sanitizer: tec's kernels clean; $upstream racecheck run(s) with hazards only in cuBLASLt's or cuDNN's kernels," \
       "reproduced without tec by the witness"
else echo "compute-sanitizer: all clean"; fi
exit $failed
