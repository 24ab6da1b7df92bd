#!/usr/bin/env bash
# Plan fingerprints, for refactors that must not change what te-compile writes (issue 52: "no
# change in behaviour"). Compiles every example and corpus model under every recipe, in
# inference and in train mode where the model takes it, and writes one line per plan:
#
#   <sha256 of the .teplan, or "exit N" when te-compile refused it>  <model> <recipe> <mode>
#
# Run it before a refactor and after, on the same machine and toolkit (the plans hold NVRTC's
# cubins), and diff the two files: every line must match, or the change of format is on
# purpose and says why. Plans are deterministic (weights from fixed seeds), so a difference is a
# difference in what tec computes or writes.
#
#   tests/plan_golden.sh BUILD/cli before.txt            # every model (moe.json alone is 1.4 GB)
#   tests/plan_golden.sh BUILD/cli after.txt --quick     # the small models only
#   diff before.txt after.txt
set -uo pipefail

if [[ $# -lt 2 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
bin=$1
out=$2
quick=${3:-}
root=$(cd "$(dirname "$0")/.." && pwd)
compile="$bin/te-compile"
[[ -x "$compile" ]] || { echo "plan_golden: no te-compile in $bin" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

recipes=(bf16 fp8-current fp8-delayed fp8-block mxfp8 nvfp4)
# Models too large for --quick (a plan of a GB and more, a minute each).
large=(moe.json llama_layer.json gpt_layer.json mlp.json swiglu_mlp.json mlp_tp.json)

models=("$root"/examples/*.json "$root"/examples/onnx/*.onnx "$root"/tests/onnx/hf_corpus/*.onnx)
: >"$out"
count=0
for model in "${models[@]}"; do
  name=$(basename "$model")
  if [[ "$quick" == "--quick" ]] && printf '%s\n' "${large[@]}" | grep -qx "$name"; then continue; fi
  extra=()
  [[ "$name" == *_tp.json ]] && extra+=(--tp 2)
  # ONNX corpus models with symbolic dims: the sizes their cross-check uses.
  if [[ "$model" == *.onnx ]] && "$compile" "$model" -o "$work/probe.teplan" -q 2>&1 | grep -q "is symbolic"; then
    extra+=(--shape batch=2 --shape seq=16)
  fi
  modes=(infer)
  [[ "$model" == *.json ]] && modes+=(train)
  for mode in "${modes[@]}"; do
    for recipe in "${recipes[@]}"; do
      plan="$work/plan.teplan"
      rm -f "$plan"
      "$compile" "$model" -o "$plan" -q --recipe "$recipe" --mode "$mode" "${extra[@]}" >/dev/null 2>&1
      rc=$?
      if [[ $rc -eq 0 ]]; then
        fingerprint=$(sha256sum "$plan" | cut -d' ' -f1)
      else
        fingerprint="exit $rc"
      fi
      echo "$fingerprint  ${model#"$root"/} $recipe $mode" >>"$out"
      count=$((count + 1))
    done
  done
done
echo "plan_golden: $count plans fingerprinted in $out" >&2
