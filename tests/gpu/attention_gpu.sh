#!/usr/bin/env bash
# Attention on the GPU (label gpu): rope as a row kernel, attention through cuDNN's SDPA.
#   - Attention alone, over the shapes a layer meets: MHA and GQA/MQA, causal or not, bshd and
#     sbhd, head dims 64 and 128 (and v's differing), cross-attention, a padding mask (seq_lens)
#     and an additive mask. te-run --verify-cpu: the output within bf16's bound of the CPU
#     reference (which sums in fp64), 100 replays bit-identical.
#   - rope alone (half and interleaved pairs, a partial rotary_dim, sbhd): bit for bit.
#   - examples/llama_layer_small.json, a whole pre-norm layer, under every recipe: te-run
#     --verify-cpu, each step from the GPU's arena before it (kernels bit for bit).
#   - Training (te-compile --mode train): the forward saves o and the log-sum-exp, cuDNN's SDPA
#     backward makes dq, dk and dv. Attention alone (GQA, causal, sbhd, cross, both masks) and
#     llama_layer_small under the recipes that train on the GPU: te-run --verify-cpu over two
#     training steps (the backward's gradients within the bound of the reference's fp64 sums,
#     kernels bit for bit), and two processes' gradients bit-identical (the backward is cuDNN's
#     deterministic one).
#   - Errors: a head dim cuDNN does not take, cuDNN missing (exit 7, naming the library).
#   bash tests/gpu/attention_gpu.sh TE_COMPILE TE_RUN OUT_DIR
# Exits 77 (skipped) without a CUDA device. cuDNN: libcudnn.so.9 on the loader's path, or
# $TEC_CUDNN_LIBRARY; else the nvidia-cudnn wheel of the python3 on PATH, if it has one.
set -uo pipefail
compile=$1 run=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
source "$here/wheel_libraries.sh"
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# attention_graph NAME B S S_KV HEADS KV_HEADS D DV CAUSAL LAYOUT MASK: a graph of one attention.
attention_graph() {
  local name=$1 b=$2 s=$3 skv=$4 h=$5 kvh=$6 d=$7 dv=$8 causal=$9 layout=${10} mask=${11}
  local q_shape='["B", "S", "QW"]' k_shape='["B", "SK", "KW"]' v_shape='["B", "SK", "VW"]'
  if [ "$layout" = sbhd ]; then q_shape='["S", "B", "QW"]' k_shape='["SK", "B", "KW"]' v_shape='["SK", "B", "VW"]'; fi
  local fourth="" inputs='"q", "k", "v"' mask_attr=""
  if [ "$mask" = padding ]; then fourth=', {"name": "seq_lens", "shape": ["B"], "dtype": "int32"}' inputs="$inputs, \"seq_lens\""; fi
  if [ "$mask" = additive ]; then
    fourth=', {"name": "mask", "shape": ["S", "SK"], "requires_grad": false}' inputs="$inputs, \"mask\"" mask_attr=', "mask": "additive"'
  fi
  cat > "$out/$name.json" <<EOF
{"name": "$name", "dtype": "bf16", "recipe": "bf16",
 "dims": {"B": $b, "S": $s, "SK": $skv, "QW": $((h * d)), "KW": $((kvh * d)), "VW": $((kvh * dv))},
 "inputs": [{"name": "q", "shape": $q_shape}, {"name": "k", "shape": $k_shape}, {"name": "v", "shape": $v_shape}$fourth],
 "ops": [{"name": "o", "op": "attention", "inputs": [$inputs],
          "attrs": {"heads": $h, "kv_heads": $kvh, "head_dim": $d, "v_head_dim": $dv, "causal": $causal, "layout": "$layout"$mask_attr}}],
 "outputs": ["o"]}
EOF
}

attention_graph probe 1 128 128 2 2 64 64 false bshd none
"$compile" "$out/probe.json" -q -o "$out/probe.teplan" || exit 1
"$run" "$out/probe.teplan" --iterations 1 --warmup 0 > "$out/probe.log" 2>&1
probe_rc=$?
if grep -q "no CUDA device" "$out/probe.log"; then
  echo "SKIPPED: $(cat "$out/probe.log")"
  exit 77
fi
[ $probe_rc = 0 ] || { cat "$out/probe.log"; echo "FAIL: the probe run failed (exit $probe_rc)"; exit 1; }

check() {  # NAME [te-run options...]: compile NAME.json, run it with --verify-cpu
  local name=$1; shift
  "$compile" "$out/$name.json" -q -o "$out/$name.teplan" > "$out/$name.compile.log" 2>&1 || { cat "$out/$name.compile.log"; fail "$name: te-compile"; return; }
  if "$run" "$out/$name.teplan" --verify-cpu --iterations 20 --warmup 2 "$@" > "$out/$name.log" 2>&1; then
    echo "PASS $name: $(grep -E '^  0 +o ' "$out/$name.log" | awk '{print "rel " $3 ", max abs " $4}')"
  else
    grep -E "FAIL|MISMATCH|error" "$out/$name.log" | head -5
    fail "$name: te-run --verify-cpu"
  fi
}

#                 name                   B  S    S_KV H  KVH D   DV  causal layout mask
attention_graph mha_d64                  2  256  256  4  4   64  64  false bshd none
attention_graph mha_d64_causal           2  256  256  4  4   64  64  true  bshd none
attention_graph gqa_d128_causal          2  384  384  8  2   128 128 true  bshd none
attention_graph mqa_d128                 1  512  512  8  1   128 128 false bshd none
attention_graph gqa_d128_causal_sbhd     2  256  256  8  2   128 128 true  sbhd none
attention_graph cross_d64                2  128  320  4  2   64  64  false bshd none
attention_graph v_head_dim_differs       2  128  128  4  4   128 64  false bshd none
attention_graph padding_causal           3  256  256  4  2   64  64  true  bshd padding
attention_graph additive_mask            2  128  128  4  4   64  64  false bshd additive
for name in mha_d64 mha_d64_causal gqa_d128_causal mqa_d128 gqa_d128_causal_sbhd cross_d64 v_head_dim_differs additive_mask; do
  check $name
done
python3 -c "import numpy as np; np.save('$out/seq_lens.npy', np.array([256, 100, 1], dtype=np.int32))"
check padding_causal --input seq_lens="$out/seq_lens.npy"

# rope alone: every variant a row kernel, so --verify-cpu's step check wants it bit for bit.
for variant in "half bshd 0" "interleaved bshd 0" "half sbhd 32" "interleaved sbhd 64"; do
  read -r style layout rotary <<< "$variant"
  name="rope_${style}_${layout}_$rotary"
  x_shape='["B", "S", "W"]'; [ "$layout" = sbhd ] && x_shape='["S", "B", "W"]'
  cat > "$out/$name.json" <<EOF
{"name": "$name", "dtype": "bf16", "recipe": "bf16", "dims": {"B": 2, "S": 4096, "W": 1024},
 "inputs": [{"name": "x", "shape": $x_shape}],
 "ops": [{"name": "y", "op": "rope", "inputs": ["x"], "attrs": {"heads": 8, "head_dim": 128, "rotary_dim": $rotary, "style": "$style", "layout": "$layout", "theta": 500000.0}}],
 "outputs": ["y"]}
EOF
  "$compile" "$out/$name.json" -q -o "$out/$name.teplan" || { fail "$name: te-compile"; continue; }
  if "$run" "$out/$name.teplan" --verify-cpu --iterations 5 --warmup 1 > "$out/$name.log" 2>&1 && grep -q "kernel .*bit-identical" "$out/$name.log"; then
    echo "PASS $name: $(grep -E 'kernel ' "$out/$name.log" | head -1 | sed 's/  */ /g')"
  else
    grep -E "FAIL|MISMATCH|error" "$out/$name.log" | head -5
    fail "$name: rope is not bit-identical to the reference"
  fi
done

# A whole layer under every recipe (forward).
for recipe in bf16 fp8-current fp8-delayed fp8-block mxfp8 nvfp4; do
  name="llama_layer_small.$recipe"
  "$compile" "$here/../../examples/llama_layer_small.json" --recipe $recipe -q -o "$out/$name.teplan" > "$out/$name.compile.log" 2>&1 \
    || { cat "$out/$name.compile.log"; fail "$name: te-compile"; continue; }
  if "$run" "$out/$name.teplan" --verify-cpu --iterations 20 --warmup 2 > "$out/$name.log" 2>&1; then
    echo "PASS $name: $(grep -E '^  0 +y ' "$out/$name.log" | awk '{print "y rel " $3}'), steps: $(grep -c 'bit-identical' "$out/$name.log") bit-identical, $(grep -c 'within bound' "$out/$name.log") within bound"
  else
    grep -E "FAIL|MISMATCH|error" "$out/$name.log" | head -8
    fail "$name: te-run --verify-cpu"
  fi
done

# Training: te-run --verify-cpu over two steps, then the same gradients from two processes.
train_check() {  # NAME MODEL [te-compile options...] -- [te-run options...]
  local name=$1 model=$2; shift 2
  local compile_args=() run_args=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do compile_args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  run_args=("$@")
  "$compile" "$model" --mode train "${compile_args[@]}" -q -o "$out/$name.teplan" > "$out/$name.compile.log" 2>&1 \
    || { cat "$out/$name.compile.log"; fail "$name: te-compile --mode train"; return; }
  "$run" "$out/$name.teplan" --inspect > "$out/$name.inspect.log" 2>&1
  if ! grep -q "SDPA backward" "$out/$name.inspect.log"; then fail "$name: no cuDNN backward launch in the plan"; return; fi
  if ! "$run" "$out/$name.teplan" --verify-cpu --verify-steps 2 --iterations 5 --warmup 1 "${run_args[@]}" > "$out/$name.log" 2>&1; then
    grep -E "FAIL|MISMATCH|error" "$out/$name.log" | head -8
    fail "$name: te-run --verify-cpu (train)"
    return
  fi
  local backward
  backward=$(grep backward "$out/$name.log" | grep 'within bound' | sed 's/.*rel \([0-9.e+-]*\).*/\1/' | sort -g | tail -1)
  for k in 1 2; do
    rm -rf "$out/$name.outputs$k"
    "$run" "$out/$name.teplan" --iterations 1 --warmup 0 --save-outputs "$out/$name.outputs$k" "${run_args[@]}" > "$out/$name.save$k.log" 2>&1 \
      || { cat "$out/$name.save$k.log"; fail "$name: te-run --save-outputs"; return; }
  done
  if diff -r -q "$out/$name.outputs1" "$out/$name.outputs2" > /dev/null; then
    echo "PASS $name (train): $(grep -c 'bit-identical' "$out/$name.log") step outputs bit-identical, $(grep -c 'within bound' "$out/$name.log") within bound (worst backward rel ${backward:-?}); gradients of two processes bit-identical"
  else
    fail "$name: two processes' gradients differ"
  fi
}
for name in mha_d64_causal gqa_d128_causal gqa_d128_causal_sbhd cross_d64 additive_mask; do
  train_check "$name.train" "$out/$name.json"
done
train_check padding_causal.train "$out/padding_causal.json" -- --input seq_lens="$out/seq_lens.npy"
for recipe in bf16 fp8-current fp8-delayed fp8-block mxfp8 nvfp4; do
  train_check "llama_layer_small.$recipe.train" "$here/../../examples/llama_layer_small.json" --recipe $recipe --shape T=128
done

# Errors.
attention_graph head_dim_12 1 64 64 2 2 12 12 false bshd none
"$compile" "$out/head_dim_12.json" -o "$out/head_dim_12.teplan" > "$out/head_dim_12.compile.log" 2>&1
"$run" "$out/head_dim_12.teplan" --iterations 1 --warmup 0 > "$out/head_dim_12.log" 2>&1
rc=$?
if grep -q "cuDNN's SDPA needs multiples of 8" "$out/head_dim_12.compile.log" && [ $rc = 4 ] && grep -q "multiples of 8" "$out/head_dim_12.log"; then
  echo "PASS head dim 12: te-compile and te-run (exit 4) say cuDNN's SDPA needs multiples of 8"
else
  cat "$out/head_dim_12.compile.log" "$out/head_dim_12.log"; fail "head dim 12: exit $rc, or no reason given"
fi
TEC_CUDNN_LIBRARY=/nonexistent/libcudnn.so.9 "$run" "$out/mha_d64.teplan" --iterations 1 --warmup 0 > "$out/no_cudnn.log" 2>&1
rc=$?
if [ $rc = 7 ] && grep -q "/nonexistent/libcudnn.so.9" "$out/no_cudnn.log"; then echo "PASS cuDNN missing: exit 7, naming it"
else cat "$out/no_cudnn.log"; fail "cuDNN missing: exit $rc"; fi

[ $failed = 0 ] && echo "attention GPU tests: all passed" || echo "attention GPU tests: FAILED"
exit $failed
