#!/usr/bin/env python3
"""tec against onnxruntime (CPU) on the same models and the same seeded inputs.

Models: the exported examples (examples/onnx/*.onnx) and models built here with onnx.helper:
FP8 Q/DQ per tensor, FP8 Q/DQ with block_size, Gemm with transB (alpha, beta), and symbolic
dims set with --shape. Each is compiled with te-compile, run with te-run --backend cpu, and
compared with onnxruntime: rel = |tec - ort| / |ort| (L2 norms) must stay under the bound of
its recipe, stated below. Exit 1 when any case exceeds it.

    python3 tests/onnx/ort_crosscheck.py --bin build/cli [--examples examples/onnx]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# ‖tec − ort‖/‖ort‖ bounds. fp32 end to end (bf16 recipe on an fp32 model: nothing is
# rounded below fp32): only the summation order differs. FP8: E4M3 keeps 3 mantissa bits
# (relative rounding up to 2^-4 per element), and tec computes its scales from amax where a
# Q/DQ model may fix them, so outputs differ by a few percent.
BOUNDS = {"bf16": 1e-5, "fp8-current": 0.08, "fp8-delayed": 0.08, "fp8-block": 0.08, "mxfp8": 0.08}


def rng_array(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def qdq_per_tensor_model(rng):
    """x -> Q/DQ (E4M3, scalar scale) -> MatMul(DQ(W stored as E4M3)) + b -> Relu."""
    k, n = 64, 32
    w = rng_array(rng, (k, n), 0.1)
    w_scale = np.float32(np.abs(w).max() / 448.0)
    w_q = numpy_helper.from_array((w / w_scale).astype(np.float32), "w_f32")
    nodes = [
        helper.make_node("QuantizeLinear", ["w_f32", "w_scale", "zp"], ["w_q"], name="quantize_w"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "zp"], ["w"], name="dequantize_w"),
        helper.make_node("QuantizeLinear", ["x", "x_scale", "zp"], ["x_q"], name="quantize_x"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "zp"], ["x_dq"], name="dequantize_x"),
        helper.make_node("MatMul", ["x_dq", "w"], ["h"], name="fc"),
        helper.make_node("Add", ["h", "b"], ["hb"], name="fc_bias"),
        helper.make_node("Relu", ["hb"], ["y"], name="act"),
    ]
    w_q.CopyFrom(numpy_helper.from_array(w, "w_f32"))
    inits = [w_q, numpy_helper.from_array(np.array(w_scale, np.float32), "w_scale"),
             numpy_helper.from_array(np.array(4.0 / 448.0, np.float32), "x_scale"),
             helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0]),
             numpy_helper.from_array(rng_array(rng, (n,), 0.02), "b")]
    graph = helper.make_graph(nodes, "qdq_per_tensor", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), "fp8-current", []


def qdq_block_model(rng):
    """x -> Q/DQ (E4M3, block_size 128 along K) -> MatMul(W)."""
    m, k, n = 16, 256, 64
    x_scale = np.full((m, k // 128), 4.0 / 448.0, np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "zp"], ["x_q"], name="quantize_x", axis=-1, block_size=128),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "zp"], ["x_dq"], name="dequantize_x", axis=-1, block_size=128),
        helper.make_node("MatMul", ["x_dq", "w"], ["y"], name="fc"),
    ]
    inits = [numpy_helper.from_array(x_scale, "x_scale"),
             helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [m, k // 128], [0] * (m * k // 128)),
             numpy_helper.from_array(rng_array(rng, (k, n), 0.06), "w")]
    graph = helper.make_graph(nodes, "qdq_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), "fp8-block", []


def gemm_trans_b_model(rng):
    """Gemm(x, W^T stored as [N, K], c) with transB=1, alpha 0.5, beta 2, then Gelu (opset 20)."""
    k, n = 64, 48
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["h"], name="gemm", transB=1, alpha=0.5, beta=2.0),
             helper.make_node("Gelu", ["h"], ["y"], name="gelu", approximate="tanh")]
    inits = [numpy_helper.from_array(rng_array(rng, (n, k), 0.2), "w"), numpy_helper.from_array(rng_array(rng, (n,), 0.1), "c")]
    graph = helper.make_graph(nodes, "gemm_trans_b", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), "bf16", []


def symbolic_dims_model(rng):
    """Named dims (batch, seq) set at compile time: LayerNormalization -> MatMul -> erf GELU."""
    h, f = 64, 128
    nodes = [helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["n"], name="ln", axis=-1),
             helper.make_node("MatMul", ["n", "w"], ["u"], name="fc"),
             helper.make_node("Gelu", ["u"], ["y"], name="gelu")]
    inits = [numpy_helper.from_array(1 + rng_array(rng, (h,), 0.1), "gamma"), numpy_helper.from_array(rng_array(rng, (h,), 0.1), "beta"),
             numpy_helper.from_array(rng_array(rng, (h, f), 0.1), "w")]
    graph = helper.make_graph(nodes, "symbolic_dims", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", f])], inits)
    return (helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), "fp8-current",
            ["--shape", "batch=2", "--shape", "seq=16"])


def check(name, model_path, recipe, extra, args, work, rng):
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    feeds, shapes = {}, {"batch": 2, "seq": 16}
    run_cmd = []
    for i, inp in enumerate(sess.get_inputs()):
        shape = [d if isinstance(d, int) else shapes[d] for d in inp.shape]
        feeds[inp.name] = rng_array(rng, shape)
        path = os.path.join(work, f"{name}.in{i}.npy")
        np.save(path, feeds[inp.name])
        run_cmd += ["--input", f"{inp.name}={path}"]
    expected = sess.run(None, feeds)
    plan = os.path.join(work, f"{name}.{recipe}.teplan")
    recipe_args = [] if "qdq" in name else ["--recipe", recipe]  # Q/DQ models choose their recipe
    subprocess.run([args.te_compile, model_path, "-o", plan, "-q", *recipe_args, *extra], check=True)
    out_dir = os.path.join(work, f"{name}.{recipe}.out")
    subprocess.run([args.te_run, plan, "--backend", "cpu", "--save-outputs", out_dir, *run_cmd], check=True,
                   stdout=subprocess.DEVNULL)
    worst = 0.0
    for o, ref in zip(sess.get_outputs(), expected):
        got = np.load(os.path.join(out_dir, o.name + ".npy"))
        assert got.shape == ref.shape, f"{name}: output {o.name} shape {got.shape} vs {ref.shape}"
        worst = max(worst, float(np.linalg.norm(got - ref) / np.linalg.norm(ref)))
    ok = worst <= BOUNDS[recipe]
    print(f"{'ok  ' if ok else 'FAIL'} {name:36s} {recipe:12s} rel {worst:.2e} (bound {BOUNDS[recipe]:.0e})", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="folder holding te-compile and te-run")
    ap.add_argument("--examples", default=os.path.join(os.path.dirname(__file__), "..", "..", "examples", "onnx"))
    args = ap.parse_args()
    args.te_compile = os.path.join(args.bin, "te-compile")
    args.te_run = os.path.join(args.bin, "te-run")
    rng = np.random.default_rng(2026)
    ok = True
    with tempfile.TemporaryDirectory(prefix="tec-ort-") as work:
        os.environ.setdefault("TEC_CACHE_DIR", os.path.join(work, "kernel-cache"))
        for file in sorted(os.listdir(args.examples)):
            if file.endswith(".onnx"):
                for recipe in ("bf16", "fp8-current", "fp8-delayed"):
                    ok &= check(file[:-5], os.path.join(args.examples, file), recipe, [], args, work, rng)
        for build in (qdq_per_tensor_model, qdq_block_model, gemm_trans_b_model, symbolic_dims_model):
            model, recipe, extra = build(rng)
            onnx.checker.check_model(model)
            path = os.path.join(work, build.__name__ + ".onnx")
            onnx.save(model, path)
            ok &= check(build.__name__, path, recipe, extra, args, work, rng)
    print("onnxruntime cross-check:", "all within bounds" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
