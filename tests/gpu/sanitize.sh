#!/usr/bin/env bash
# compute-sanitizer's four tools on every example plan (run on the GPU machine):
#   bash tests/gpu/sanitize.sh BUILD_DIR OUT_DIR
# Compiles every example model - examples/mlp_tiny.json under every recipe, swiglu_mlp.json,
# mlp.json (its T=16 profile) and the ONNX models in examples/onnx - runs each plan with te-run
# (2 graph replays) under memcheck (with leak check), racecheck, initcheck and synccheck, and
# parses each tool's summary line. Exits 1 if any tool reports an error or prints no summary.
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
failed=0
printf "%-40s %-10s %s\n" plan tool errors
# model file : recipe ("-": the model's own) : extra te-compile arguments
for entry in mlp_tiny.json:bf16 mlp_tiny.json:fp8-current mlp_tiny.json:fp8-delayed mlp_tiny.json:fp8-block \
             mlp_tiny.json:mxfp8 mlp_tiny.json:nvfp4 swiglu_mlp.json:fp8-delayed "mlp.json:fp8-delayed:--shape T=16" \
             onnx/gpt_mlp.onnx:- onnx/gpt_mlp_opset13_torchscript.onnx:- onnx/llama_mlp.onnx:- onnx/llama_mlp_opset18.onnx:-; do
  IFS=: read -r file recipe compile_extra <<< "$entry"
  name=$(basename "${file%.*}").${recipe/#-/default}
  plan="$out/$name.teplan"
  args=(-o "$plan" -q)
  [ "$recipe" != - ] && args+=(--recipe "$recipe")
  [ -n "$compile_extra" ] && read -ra more <<< "$compile_extra" && args+=("${more[@]}")
  "$build/cli/te-compile" "examples/$file" "${args[@]}" || { echo "te-compile failed: $entry"; failed=1; continue; }
  for tool in memcheck racecheck initcheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    log="$out/$name.$tool.log"
    "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 0 "$build/cli/te-run" "$plan" --iterations 2 --warmup 0 > "$log" 2>&1
    # memcheck, initcheck, synccheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK
    # SUMMARY: H hazards displayed (N errors, W warnings)".
    errors=$(grep -oE "ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: .*\(([0-9]+) error" "$log" | tail -1 |
             grep -oE "[0-9]+ error" | grep -oE "[0-9]+")
    if [ -z "$errors" ]; then errors="no summary"; failed=1; elif [ "$errors" != 0 ]; then
      failed=1
      # Which kernels: tec's (row.cu, quantize, delayed scaling) or cuBLASLt's (nvjet, cublasLt::).
      kernels=$(grep -oE "access at [^+<( ]+|^=========     at (void )?[^+<( ]+" "$log" | sed -E 's/.* at (void )?//' | sort -u | head -4 | paste -sd, -)
      errors="$errors in $kernels"
    fi
    printf "%-40s %-10s %s\n" "$name" "$tool" "$errors"
  done
done
[ $failed = 0 ] && echo "compute-sanitizer: all clean" || echo "compute-sanitizer: FAILED (logs in $out)"
exit $failed
