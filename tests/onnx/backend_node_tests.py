#!/usr/bin/env python3
"""ONNX's own backend node tests, run through tec.

Takes the node test cases of the installed `onnx` package (onnx/backend/test/case/node: the
same cases as onnx/backend/test/data/node, generated here because PyPI wheels no longer ship
the data) whose ops tec claims (`te-compile --onnx-ops`). Each case is compiled with
te-compile and run with te-run (--backend cpu, or gpu), and every output is compared with the
case's expected output at the case's tolerance (rtol/atol, default 1e-3/1e-7; a bf16 output, or an fp32
model's attention, which tec runs in bf16, at 2^-7).

Inputs that tec takes only as constants (the claim table's constant_inputs: a Reshape's
shape, LayerNormalization's Scale and B, ...) are turned into initializers holding the
case's data first: tec compiles weights into the plan.

Prints one line per failure, then `N passed, N failed, N unsupported`; exit 1 on a failure.
A case is unsupported when te-compile (or te-run on the GPU) exits with code 4, the code for
"valid but outside tec's claim"; its reason is listed with --verbose.

    python3 tests/onnx/backend_node_tests.py --bin build/cli [--backend gpu] [--filter gemm] [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

EXIT_UNSUPPORTED = 4


def claims(te_compile):
    out = subprocess.run([te_compile, "--onnx-ops"], check=True, capture_output=True, text=True).stdout
    return {op["op"]: op for op in json.loads(out)["ops"]}


def node_cases():
    from onnx.backend.test.case import node as node_case_module
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return node_case_module.collect_testcases(None)


def as_array(value):
    if isinstance(value, onnx.TensorProto):
        value = numpy_helper.to_array(value)
    return np.asarray(value)


def as_tensor(value, name):
    if isinstance(value, onnx.TensorProto):
        t = onnx.TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    return numpy_helper.from_array(np.asarray(value), name)


def freeze_constant_inputs(model, inputs, claimed):
    """Graph inputs that a claimed op needs constant become initializers with the case's data."""
    graph = model.graph
    index = {vi.name: i for i, vi in enumerate(graph.input)}
    frozen = set()
    for node in graph.node:
        claim = claimed.get(node.op_type)
        for slot in claim["constant_inputs"] if claim else []:
            if slot < len(node.input) and node.input[slot] in index:
                frozen.add(node.input[slot])
    if not frozen:
        return model, inputs
    model = onnx.ModelProto.FromString(model.SerializeToString())
    kept_inputs, kept_values = [], []
    for vi, value in zip(model.graph.input, inputs):
        if vi.name in frozen:
            model.graph.initializer.append(as_tensor(value, vi.name))
        else:
            kept_inputs.append(vi)
            kept_values.append(value)
    del model.graph.input[:]
    model.graph.input.extend(kept_inputs)
    return model, kept_values


def first_line(text):
    """The error, with the first node line of a multi-node report."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    at = next((i for i, line in enumerate(lines) if "error" in line), max(len(lines) - 1, 0))
    return " ".join(lines[at:at + 2])[:500] if lines else ""


def run_case(case, claimed, args, work):
    """Returns (status, detail): status is passed, failed or unsupported."""
    inputs, outputs = case.data_sets[0]
    model, inputs = freeze_constant_inputs(case.model, list(inputs), claimed)
    os.makedirs(work, exist_ok=True)
    model_path = os.path.join(work, "model.onnx")
    onnx.save(model, model_path)
    plan = os.path.join(work, "plan.teplan")
    report = os.path.join(work, "report.json")
    compile_cmd = [args.te_compile, model_path, "-o", plan, "-q", "--report", report]
    r = subprocess.run(compile_cmd, capture_output=True, text=True, timeout=300)
    if r.returncode == EXIT_UNSUPPORTED:
        return "unsupported", "te-compile: " + first_line(r.stderr)
    if r.returncode != 0:
        return "failed", f"te-compile exit {r.returncode}: {first_line(r.stderr)}"
    run_cmd = [args.te_run, plan, "--backend", args.backend, "--save-outputs", os.path.join(work, "out")]
    if args.backend == "gpu":
        run_cmd += ["--iterations", "1", "--warmup", "0"]
    for vi, value in zip(model.graph.input, inputs):
        path = os.path.join(work, f"input_{len(run_cmd)}.npy")
        array = as_array(value)
        try:  # integer inputs as integers (tec reads INT64/INT32 inputs as int32), the rest as float32
            np.save(path, array.astype(np.int64) if array.dtype.kind in "iu" else array.astype(np.float32))
        except (TypeError, ValueError):
            return "unsupported", f"input {vi.name} has no float32 or integer form"
        run_cmd += ["--input", f"{vi.name}={path}"]
    r = subprocess.run(run_cmd, capture_output=True, text=True, timeout=600)
    if r.returncode == EXIT_UNSUPPORTED:
        return "unsupported", "te-run: " + first_line(r.stderr)
    if r.returncode != 0:
        return "failed", f"te-run exit {r.returncode}: {first_line(r.stderr)}"
    for vi, expected in zip(model.graph.output, outputs):
        got = np.load(os.path.join(work, "out", vi.name + ".npy"))
        # An fp32 model's attention runs in bf16 (cuDNN's SDPA takes 16-bit operands; the CPU
        # reference runs the same casts, and the plan's report says so): judged as a bf16 output.
        attention_in_bf16 = "reads bf16 copies of the model's fp32" in open(report).read()
        bf16_output = vi.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16 or attention_in_bf16
        expected = as_array(expected).astype(np.float32)
        if got.shape != expected.shape:
            return "failed", f"output {vi.name}: shape {got.shape}, expected {expected.shape}"
        rtol = case.rtol if case.rtol is not None else 1e-3
        if bf16_output:
            # One bf16 step is 2^-8 to 2^-7 of the value (8 significant bits): closer than one
            # step, a case's own reference (which may round intermediates to bf16 where tec
            # rounds once) is not exact either; see fp32_evaluation below.
            rtol = max(rtol, 2.0 ** -7)
        atol = case.atol if case.atol is not None else 1e-7
        if bf16_output and not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
            # The case's bf16 reference may be further from the exact result than tec (which
            # rounds once): then tec must match the same model evaluated in fp32, rounded to bf16.
            exact = fp32_evaluation(model, inputs, vi.name)
            if exact is not None and np.allclose(got, exact, rtol=rtol, atol=atol, equal_nan=True):
                continue
        if not np.allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True):
            err = np.abs(got - expected)
            worst = int(np.argmax(err - rtol * np.abs(expected)))
            return "failed", (f"output {vi.name}: max |diff| {float(err.max()):.3g} at {worst} (got {got.flat[worst]:.6g}, "
                              f"expected {expected.flat[worst]:.6g}; rtol {rtol}, atol {atol})")
    return "passed", ""


def fp32_evaluation(model, inputs, output):
    """`output` of the model evaluated by onnx's reference with every bf16 tensor widened to fp32,
    then rounded to bf16 (what a computation that rounds once gives); None if that cannot be
    done for this model (a Cast to bf16 inside it)."""
    import ml_dtypes
    from onnx.reference import ReferenceEvaluator
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    if any(a.name == "to" for n in g.node for a in n.attribute):
        return None
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16:
            vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    for t in g.initializer:
        if t.data_type == onnx.TensorProto.BFLOAT16:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    feeds = {vi.name: as_array(v).astype(np.float32) for vi, v in zip(model.graph.input, inputs)}
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = ReferenceEvaluator(m).run([output], feeds)[0]
    except Exception:  # noqa: BLE001 - any failure means: no fp32 evaluation to compare with
        return None
    return np.asarray(result, np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="folder holding te-compile and te-run")
    ap.add_argument("--backend", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("--json", help="write every case's result here")
    ap.add_argument("--verbose", action="store_true", help="also list unsupported cases with the reason")
    args = ap.parse_args()
    args.te_compile = os.path.join(args.bin, "te-compile")
    args.te_run = os.path.join(args.bin, "te-run")
    claimed = claims(args.te_compile)

    results = []
    with tempfile.TemporaryDirectory(prefix="tec-onnx-node-") as tmp:
        os.environ.setdefault("TEC_CACHE_DIR", os.path.join(tmp, "kernel-cache"))
        cases = [c for c in node_cases() if args.filter in c.name]
        for case in sorted(cases, key=lambda c: c.name):
            ops = {n.op_type for n in case.model.graph.node}
            if not ops or not ops <= set(claimed):
                continue  # a case of an op tec does not claim
            try:
                status, detail = run_case(case, claimed, args, os.path.join(tmp, case.name))
            except subprocess.TimeoutExpired as e:
                status, detail = "failed", f"timed out: {' '.join(e.cmd[:2])}"
            results.append({"case": case.name, "ops": sorted(ops), "status": status, "detail": detail})
            if status == "failed" or (args.verbose and status == "unsupported"):
                print(f"{status.upper():12s} {case.name}: {detail}", flush=True)

    counts = {s: sum(r["status"] == s for r in results) for s in ("passed", "failed", "unsupported")}
    by_op = {}
    for r in results:
        for op in r["ops"]:
            by_op.setdefault(op, {"passed": 0, "failed": 0, "unsupported": 0})[r["status"]] += 1
    print(f"\nONNX backend node tests, tec backend {args.backend}, onnx {onnx.__version__}: "
          f"{len(results)} cases of claimed ops")
    for op in sorted(by_op):
        c = by_op[op]
        print(f"  {op:20s} {c['passed']:4d} passed {c['failed']:4d} failed {c['unsupported']:4d} unsupported")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['unsupported']} unsupported")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"backend": args.backend, "onnx": onnx.__version__, "counts": counts, "cases": results}, f, indent=1)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
