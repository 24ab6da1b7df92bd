#!/usr/bin/env bash
# compute-sanitizer's four tools on every example plan (run on the GPU machine):
#   bash tests/gpu/sanitize.sh BUILD_DIR OUT_DIR
# Compiles examples/mlp_tiny.json under every recipe and swiglu_mlp.json, runs each plan with
# te-run (2 graph replays and the eager path) under memcheck (with leak check), racecheck,
# initcheck and synccheck, and parses each tool's summary line. Exits 1 if
# any tool reports an error or prints no summary.
set -uo pipefail
build=$1 out=$2
mkdir -p "$out"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
failed=0
printf "%-28s %-10s %s\n" plan tool errors
for model in mlp_tiny:bf16 mlp_tiny:fp8-current mlp_tiny:fp8-delayed mlp_tiny:fp8-block mlp_tiny:mxfp8 swiglu_mlp:fp8-delayed; do
  name=${model%%:*} recipe=${model##*:}
  plan="$out/$name.$recipe.teplan"
  "$build/cli/te-compile" "examples/$name.json" --recipe "$recipe" -o "$plan" -q || { echo "te-compile failed: $model"; failed=1; continue; }
  for tool in memcheck racecheck initcheck synccheck; do
    extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    log="$out/$name.$recipe.$tool.log"
    "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 0 "$build/cli/te-run" "$plan" --iterations 2 --warmup 0 > "$log" 2>&1
    # memcheck, initcheck, synccheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK
    # SUMMARY: H hazards displayed (N errors, W warnings)".
    errors=$(grep -oE "ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: .*\(([0-9]+) error" "$log" | tail -1 |
             grep -oE "[0-9]+ error" | grep -oE "[0-9]+")
    if [ -z "$errors" ]; then errors="no summary"; failed=1; elif [ "$errors" != 0 ]; then failed=1; fi
    printf "%-28s %-10s %s\n" "$name.$recipe" "$tool" "$errors"
  done
done
[ $failed = 0 ] && echo "compute-sanitizer: all clean" || echo "compute-sanitizer: FAILED (logs in $out)"
exit $failed
