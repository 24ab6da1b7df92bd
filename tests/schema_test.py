"""The JSON schema documents what the frontend accepts: every example must validate, and a
few malformed graphs must not (so that the schema cannot silently accept anything)."""
import json
import pathlib
import sys

import jsonschema

root = pathlib.Path(sys.argv[1])
te_compile = sys.argv[2]
schema = json.loads((root / "schemas/graph.schema.json").read_text())
validator = jsonschema.Draft202012Validator(schema)
jsonschema.Draft202012Validator.check_schema(schema)

passed = failed = 0
def expect(name, ok):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + name)
    passed += ok
    failed += not ok

examples = sorted((root / "examples").glob("*.json"))
assert examples, "no examples found"
for path in examples:
    errors = list(validator.iter_errors(json.loads(path.read_text())))
    expect(f"{path.name} validates", not errors)
    for e in errors:
        print("     ", "/".join(map(str, e.absolute_path)), e.message)

good = json.loads((root / "examples/mlp_tiny.json").read_text())
for name, mutate in [
    ("unknown op is rejected", lambda g: g["ops"][0].update(op="lineer")),
    ("unknown recipe is rejected", lambda g: g.update(recipe="fp9")),
    ("negative dim is rejected", lambda g: g["dims"].update(T=[-5])),
    ("unknown field is rejected", lambda g: g.update(recipie="bf16")),
]:
    g = json.loads(json.dumps(good))
    mutate(g)
    expect(name, not validator.is_valid(g))

# The plan manifest that te-compile writes must match schemas/plan.schema.json.
import subprocess
plan_schema = json.loads((root / "schemas/plan.schema.json").read_text())
jsonschema.Draft202012Validator.check_schema(plan_schema)
plan_validator = jsonschema.Draft202012Validator(plan_schema)
plans = [("mlp_tiny.json", recipe, []) for recipe in ["bf16", "fp8-delayed", "nvfp4"]]
# The mid-M GEMM's launch (dynamic shared memory) and its weight's device layout.
plans.append(("mlp.json", "fp8-current", ["--shape", "T=128", "--mid-m-gemm"]))
# fp8-static: a Q/DQ model (tests/onnx/ort_crosscheck.py builds it), its recipe from the model.
import tempfile
import numpy as np
sys.path.insert(0, str(root / "tests" / "onnx"))
import ort_crosscheck
static_dir = tempfile.mkdtemp(prefix="tec-schema-")
static_model = pathlib.Path(static_dir) / "static.onnx"
static_model.write_bytes(ort_crosscheck.static_mlp_model(np.random.default_rng(1), "channel").SerializeToString())
plans.append((str(static_model), "", []))
plans.append(("mlp_tiny.json", "fp8-delayed", ["--mode", "train", "--optimizer", "adamw", "--shape", "T=32"]))
plans.append(("swiglu_mlp.json", "bf16", ["--mode", "train", "--wgrad", "write", "--shape", "T=32"]))
# Tensor parallel: every rank's constants, the layouts, and NCCL launches (an FP8 all-gather).
plans.append(("mlp_tp.json", "fp8-current", ["--tp", "2", "--shape", "T=64"]))
plans.append(("mlp_tp.json", "bf16", ["--tp", "2", "--shape", "T=64", "--tp-overlap", "on"]))
# A whole layer: rope row kernels and one cuDNN attention launch.
plans.append(("llama_layer_small.json", "fp8-current", ["--shape", "T=128"]))
# Its train plan: cuDNN's backward launch (the saved o and log-sum-exp, d_o, dq, dk, dv).
plans.append(("llama_layer_small.json", "bf16", ["--mode", "train", "--shape", "T=128"]))
for model, recipe, extra in plans:
    recipe_args = ["--recipe", recipe] if recipe else []
    out = subprocess.run([te_compile, str(root / "examples" / model), *recipe_args, "--dump-after", "plan", "-q", *extra],
                         capture_output=True, text=True, check=True).stdout
    manifest = json.loads(out)
    errors = list(plan_validator.iter_errors(manifest))
    expect(f"plan manifest ({model} {recipe} {' '.join(extra)}) validates against plan.schema.json", not errors)
    for e in errors[:5]:
        print("     ", "/".join(map(str, e.absolute_path)), e.message)
    if not recipe:
        quantizers = [t["quantizer"] for p in manifest["profiles"] for t in p["tensors"] if t["quantizer"]]
        expect("the static plan's recipe is fp8-static, and its quantizers keep the model's scales",
               manifest["recipe"] == "fp8-static" and all(q["kind"] == "fp8_static" for q in quantizers) and
               any(q["static_scale_inv"] > 0 for q in quantizers))
    if "--mid-m-gemm" in extra:
        launches = [l for p in manifest["profiles"] for l in p["gpu"]["launches"]]
        buffers = [b for p in manifest["profiles"] for b in p["buffers"]]
        expect("the mid-M plan has a kernel with dynamic shared memory and a mid_m_tiles weight",
               any(l.get("shared_bytes", 0) > 0 for l in launches) and any(b.get("device_layout") == "mid_m_tiles" for b in buffers))

    if "--tp" in extra:
        launches = [l for p in manifest["profiles"] for l in p["gpu"]["launches"]]
        ops = [l["collective"]["op"] for l in launches if l["kind"] == "collective"]
        if "--tp-overlap" in extra:
            exchanges = [l["collective"] for l in launches if l["kind"] == "collective" and l["collective"]["op"] == "ring_exchange"]
            expect("the overlapped TP plan forks a side stream for the gather and the ring's exchange, joins it, and sums what arrived",
                   ops == ["all_gather", "ring_exchange"] and [l["kind"] for l in launches].count("join") == 2 and
                   any("x_rows" in l.get("gemm", {}) for l in launches) and exchanges[0].get("send_offset", 0) > 0 and
                   any(l.get("entry") == "tec_accumulate" for l in launches))
        else:
            expect("the TP plan's launches hold its collectives: the amax all-reduce, the FP8 all-gather, the reduce-scatter",
                   manifest["tp_size"] == 2 and ops == ["all_reduce", "all_gather", "reduce_scatter"])

    if model.startswith("llama_layer"):
        launches = [l for p in manifest["profiles"] for l in p["gpu"]["launches"]]
        attention = [l["attention"] for l in launches if l["kind"] == "attention"]
        train = "train" in extra
        expect("the llama layer's plan has GPU code: one attention launch (GQA 8 / 2 heads of 64, causal) and the rope kernels" +
               (", then the backward's (the rope backward kernels too)" if train else ""),
               manifest["profiles"][0]["gpu"]["supported"] and len(attention) == (2 if train else 1) and attention[0]["heads"] == 8 and
               attention[0]["kv_heads"] == 2 and attention[0]["head_dim"] == 64 and attention[0]["causal"] and
               not attention[0].get("backward", False) and (not train or attention[1].get("backward") is True) and
               sum(1 for l in launches if l["kind"] == "kernel" and "TEC_PRODUCER=21" in manifest["modules"][l["module"]]["defines"]) ==
               (4 if train else 2))

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
