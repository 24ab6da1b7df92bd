#!/usr/bin/env python3
"""Hostile input, as an attacker and a careless user would give it (issue 51): every case runs
te-compile or te-run and checks the exit code, a line of the message, and what must not happen
(a crash, exit 70, a file outside the folder given, a multi-megabyte error line).

Each of the issue's reproductions is a case, and so is at least one sibling of each class.

  hostile_inputs_test.py --bin BUILD/cli --mutator BUILD/tests/plan_mutator --source SRC --work DIR
"""
import argparse
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np

failures = []


def check(name, ok, detail=""):
    print(("ok:   " if ok else "FAIL: ") + name + ("" if ok else "\n      " + detail))
    if not ok:
        failures.append(name)


def run(name, cmd, code, text, max_stderr=2000, cwd=None, env=None):
    """Runs cmd; expects exit `code` and `text` in its output, and a short stderr."""
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", cwd=cwd, env=env, timeout=300)
    out = p.stdout + p.stderr
    detail = f"exit {p.returncode} (expected {code}); stderr: {p.stderr[:600]!r}"
    ok = p.returncode == code and text in out and len(p.stderr) <= max_stderr and p.returncode != 70
    if text not in out:
        detail += f"\n      output lacks {text!r}"
    if len(p.stderr) > max_stderr:
        detail += f"\n      stderr is {len(p.stderr)} characters"
    check(name, ok, detail)
    return p


def manifest_of(path):
    with open(path, "rb") as f:
        head = f.read(64)
        _, _, _, offset, size = struct.unpack("<8sIIQQ", head[:32])
        f.seek(offset)
        return json.loads(f.read(size))


def buffer_index(manifest, name, profile=0):
    for i, b in enumerate(manifest["profiles"][profile]["buffers"]):
        if b["name"] == name:
            return i
    raise KeyError(name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mutator", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    a.bin, a.mutator, a.source, a.work = map(os.path.abspath, (a.bin, a.mutator, a.source, a.work))
    compile_ = os.path.join(a.bin, "te-compile")
    te_run = os.path.join(a.bin, "te-run")
    E = os.path.join(a.source, "examples")
    W = a.work
    shutil.rmtree(W, ignore_errors=True)
    os.makedirs(W)
    J = lambda *p: os.path.join(W, *p)  # noqa: E731
    tiny = json.load(open(os.path.join(E, "mlp_tiny.json")))

    def graph(name, edit):
        g = json.loads(json.dumps(tiny))
        edit(g)
        path = J(name)
        with open(path, "w") as f:
            f.write(g if isinstance(g, str) else json.dumps(g))
        return path

    def set_field(src, dst, pointer, value):
        subprocess.run([a.mutator, "--set", src, dst, pointer, json.dumps(value)], check=True)
        return dst

    plan = J("t.teplan")
    subprocess.run([compile_, os.path.join(E, "mlp_tiny.json"), "--recipe", "fp8-delayed", "--shape", "T=32", "-q", "-o", plan], check=True)
    train = J("train.teplan")
    subprocess.run([compile_, os.path.join(E, "mlp_tiny.json"), "--shape", "T=32", "--mode", "train", "--optimizer", "adamw", "-q",
                    "-o", train], check=True)

    print("== 1. deeply nested JSON, and values quoted in errors")
    g = dict(tiny)
    g["ops"] = [dict(o) for o in tiny["ops"]]
    g["ops"][0]["attrs"] = dict(g["ops"][0]["attrs"], eps=[0])
    text = json.dumps(g)
    for depth in (100000, 50000):
        with open(J(f"deep{depth}.json"), "w") as f:
            f.write(text.replace("[0]", "[" * depth + "]" * depth))
        run(f"an attribute nested {depth} deep is refused before it is parsed", [compile_, J(f"deep{depth}.json")], 3,
            "JSON nested deeper than 64 levels", max_stderr=400)
    with open(J("deep50.json"), "w") as f:
        f.write(text.replace("[0]", "[" * 50 + "]" * 50))
    run("a value nested 50 deep is quoted as an excerpt", [compile_, J("deep50.json")], 3, "got [[[[...]]]]", max_stderr=400)
    run("a long array value is quoted as an excerpt",
        [compile_, graph("long.json", lambda g: g["ops"][0]["attrs"].update(eps=list(range(100000))))], 3, "got [0, 1, 2", max_stderr=500)
    run("sibling: deep nesting in another field (a dim's profile list)",
        [compile_, graph("deepdims.json", lambda g: g["dims"].update(T=json.loads("[" * 70 + "]" * 70)))], 3, "nested deeper than 64")
    run("sibling: a 1 MB op name is refused, not printed",
        [compile_, graph("longname.json", lambda g: g["ops"][0].update(name="n" * 1000000))], 3, "longer than 4096 bytes", max_stderr=600)
    run("sibling: a 1 MB unknown key is not printed whole",
        [compile_, graph("longkey.json", lambda g: g["ops"][0]["attrs"].update({"k" * 1000000: 1}))], 3, "longer than 4096", max_stderr=600)
    deep_value = json.loads("[" * 100 + "]" * 100)
    run("sibling: a plan manifest nested 100 deep (checksum recomputed) is refused",
        [te_run, set_field(plan, J("deep.teplan"), "/name", deep_value), "--inspect"], 3, "nested deeper than 64", max_stderr=400)

    print("== 2. names that reach the file system stay in their folder")
    os.makedirs(J("cwd"))
    esc = graph("escape.json", lambda g: (g["ops"][-1].update(name="../escaped_y"), g.update(outputs=["../escaped_y"])))
    subprocess.run([compile_, esc, "--shape", "T=32", "-q", "-o", J("escape.teplan")], check=True)
    run("an output named ../escaped_y is saved inside --save-outputs", [te_run, J("escape.teplan"), "--backend", "cpu", "--save-outputs", "out"],
        0, "saved as %2E.%2Fescaped_y.npy", cwd=J("cwd"))
    check("nothing was written outside the folder", os.listdir(J("cwd")) == ["out"] and not os.path.exists(J("escaped_y.npy")),
          str(os.listdir(J("cwd"))))
    for label, name in [("an absolute path", os.path.join(W, "abs_y")), ("'..'", ".."), ("a NUL", "y\u0000z"), ("'.'", ".")]:
        p = graph(f"name{len(label)}.json", lambda g, n=name: (g["ops"][-1].update(name=n), g.update(outputs=[n])))
        subprocess.run([compile_, p, "--shape", "T=32", "-q", "-o", J("named.teplan")], check=True)
        shutil.rmtree(J("named_out"), ignore_errors=True)
        run(f"sibling: an output named {label} is escaped", [te_run, J("named.teplan"), "--backend", "cpu", "--save-outputs", J("named_out")],
            0, "saved as ")
        files = os.listdir(J("named_out"))
        check(f"  ... into one file inside the folder ({files})", len(files) == 1 and "/" not in files[0] and files[0] not in (".", ".."))
    check("  ... and the absolute path was not written", not os.path.exists(os.path.join(W, "abs_y.npy")))
    p = graph("toolong.json", lambda g: (g["ops"][-1].update(name="y" * 300), g.update(outputs=["y" * 300])))
    subprocess.run([compile_, p, "--shape", "T=32", "-q", "-o", J("toolong.teplan")], check=True)
    run("sibling: an output name too long for a file name is refused before any file is written",
        [te_run, J("toolong.teplan"), "--backend", "cpu", "--save-outputs", J("toolong_out")], 3, "tec writes at most 200")
    check("  ... and nothing was written", os.listdir(J("toolong_out")) == [] if os.path.isdir(J("toolong_out")) else True)
    os.makedirs(J("linked"))
    with open(J("outside.txt"), "w") as f:
        f.write("keep")
    os.symlink(J("outside.txt"), J("linked", "y.npy"))
    run("sibling: a link planted as DIR/y.npy is replaced, not written through",
        [te_run, plan, "--backend", "cpu", "--save-outputs", J("linked")], 0, "saved outputs")
    check("  ... the file it pointed at is untouched", open(J("outside.txt")).read() == "keep")
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32), "W")
    out_name = os.path.join(W, "onnx_abs_y")
    m = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "W"], [out_name])], "g",
                                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                                            [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, [4, 8])], [w]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, J("abs.onnx"))
    compiled = subprocess.run([compile_, J("abs.onnx"), "-q", "-o", J("abs_onnx.teplan")], capture_output=True, text=True)
    if compiled.returncode == 0:
        run("an ONNX output named by an absolute path is saved inside the folder",
            [te_run, J("abs_onnx.teplan"), "--backend", "cpu", "--save-outputs", J("onnx_out")], 0, "saved as %2F")
        check("  ... and not at that path", not os.path.exists(out_name + ".npy"))
    else:
        check("the ONNX model with an absolute output name compiles", False, compiled.stderr[:300])

    print("== 3. inputs are what the plan says, or refused")
    rng = np.random.default_rng(1)
    for shape in [(64, 32), (2, 1024), (2048,), (1, 32, 64)]:
        f = J("x_" + "x".join(map(str, shape)) + ".npy")
        np.save(f, rng.standard_normal(shape).astype(np.float32))
        run(f"x of shape {list(shape)} for [32, 64] is refused", [te_run, plan, "--backend", "cpu", "--input", f"x={f}"], 3,
            f"input 'x' has shape [32, 64], the file holds [{', '.join(map(str, shape))}]")
    np.save(J("dy_bad.npy"), rng.standard_normal((64, 32)).astype(np.float32))
    run("a train plan's dy of [64, 32] is refused", [te_run, train, "--backend", "cpu", "--input", f"dy={J('dy_bad.npy')}"], 3,
        "input 'dy' has shape [32, 64]")
    np.save(J("x_int.npy"), np.ones((32, 64), dtype=np.int64))
    run("integers for a bf16 input are refused", [te_run, plan, "--backend", "cpu", "--input", f"x={J('x_int.npy')}"], 3,
        "input 'x' is bf16, the file holds int64 values")
    run("a wrong input name lists the plan's inputs", [te_run, plan, "--backend", "cpu", "--input", f"w={J('x_int.npy')}"], 2,
        "the plan has no input 'w'; its inputs are: x")
    run("sibling: a state tensor given as an input says it is no input",
        [te_run, train, "--backend", "cpu", "--input", f"optimizer.lr={J('dy_bad.npy')}"], 2, "its inputs are: x, dy")
    run("sibling: an input given twice is refused",
        [te_run, plan, "--backend", "cpu", "--input", f"x={J('x_int.npy')}", "--input", f"x={J('x_int.npy')}"], 2, "given twice")
    splits = {"name": "splits", "inputs": [{"name": "x", "shape": [16, 32]}, {"name": "splits", "shape": [3], "dtype": "int32"}],
              "ops": [{"name": "fc", "op": "grouped_linear", "inputs": ["x", "splits"],
                       "attrs": {"num_gemms": 3, "in_features": 32, "out_features": 16}}], "outputs": ["fc"]}
    with open(J("splits.json"), "w") as f:
        json.dump(splits, f)
    subprocess.run([compile_, J("splits.json"), "-q", "-o", J("splits.teplan")], check=True)
    np.save(J("splits_float.npy"), np.array([8.7, 7.2, float("nan")], dtype=np.float32))
    run("floats for int32 routing are refused, not truncated", [te_run, J("splits.teplan"), "--backend", "cpu", "--input",
                                                                f"splits={J('splits_float.npy')}"], 3, "input 'splits' is int32, the file holds float32")
    np.save(J("splits_int.npy"), np.array([8, 8, 0], dtype=np.int64))
    run("integers for int32 routing run", [te_run, J("splits.teplan"), "--backend", "cpu", "--input", f"splits={J('splits_int.npy')}"], 0, "fc")

    print("== 4. runtime scalars in range, everywhere one is set")
    for setting, text in [("optimizer.beta1=1", "optimizer.beta1"), ("optimizer.step=-1", "optimizer.step"), ("optimizer.lr=-1", "in [0, 1000]"),
                          ("optimizer.eps=0", "in (0, 1]"), ("optimizer.eps=-1", "in (0, 1]"), ("optimizer.weight_decay=5", "in [0, 1]"),
                          ("optimizer.beta1=2", "in [0, 1)"), ("optimizer.step=1.5", "a whole number"),
                          ("first_microbatch=0.5", "0 or 1"), ("forward_only=2", "0 or 1")]:
        run(f"te-run --scalar {setting} is refused", [te_run, train, "--backend", "cpu", "--iterations", "2", "--scalar", setting], 2, text)
    for option in ["--lr", "--eps", "--beta1", "--beta2", "--weight-decay"]:
        run(f"te-compile {option} nan is refused", [compile_, os.path.join(E, "mlp_tiny.json"), "--mode", "train", "--optimizer", "adamw",
                                                     option, "nan", "-o", J("nan.teplan")], 2, "must be")
    check("  ... and no plan was written", not os.path.exists(J("nan.teplan")))
    run("te-compile --lr 0 is a valid learning rate", [compile_, os.path.join(E, "mlp_tiny.json"), "--mode", "train", "--optimizer", "adamw",
                                                        "--lr", "0", "-q"], 0, "")
    run("te-compile --lr -1 says the range in a short line", [compile_, os.path.join(E, "mlp_tiny.json"), "--mode", "train", "--optimizer",
                                                               "adamw", "--lr", "-1"], 2, "optimizer.lr (the learning rate) must be in [0, 1000], got -1",
        max_stderr=200)
    run("sibling: --lr without AdamW is refused", [compile_, os.path.join(E, "mlp_tiny.json"), "--mode", "train", "--lr", "1e-3"], 2,
        "add --mode train --optimizer adamw")

    print("== 5. crafted plans with a valid checksum")
    mf = manifest_of(plan)
    x, ln = buffer_index(mf, "x.data"), buffer_index(mf, "ln.data")
    run("ln.data moved over live x.data is refused", [te_run, set_field(plan, J("overlap.teplan"), f"/profiles/0/buffers/{ln}/offset", 256),
                                                      "--backend", "cpu"], 3, "share bytes while both are live")
    run("  ... and by --inspect", [te_run, J("overlap.teplan"), "--inspect"], 3, "share bytes")
    y = buffer_index(mf, "y.data")
    run("an output moved into the constants region is refused at load, not exit 70 at run",
        [te_run, set_field(plan, J("const_out.teplan"), f"/profiles/0/buffers/{y}/region", "constants"), "--inspect"], 3,
        "cannot live in")
    run("sibling: an input moved to the scratch region is refused",
        [te_run, set_field(plan, J("scratch_in.teplan"), f"/profiles/0/buffers/{x}/region", "scratch"), "--inspect"], 3, "cannot live in")
    run("sibling: a buffer living past the last step is refused",
        [te_run, set_field(plan, J("life.teplan"), f"/profiles/0/buffers/{ln}/lifetime", [0, 99]), "--inspect"], 3,
        "lives outside the profile's steps")
    run("sibling: the constants blob moved by 256 bytes is refused",
        [te_run, set_field(plan, J("blob.teplan"), "/blobs/0/offset", 256), "--inspect"], 3, "has its next blob")
    run("sibling: the inputs list emptied is refused", [te_run, set_field(plan, J("noin.teplan"), "/profiles/0/inputs", []), "--inspect"], 3,
        "input tensor 'x' is not listed")
    run("sibling: an arena larger than the profiles' is refused",
        [te_run, set_field(plan, J("arena.teplan"), "/arena_bytes", 1 << 40), "--inspect"], 3, "its largest profile's")
    tf = manifest_of(train)
    tensors = tf["profiles"][0]["tensors"]
    w = next(i for i, t in enumerate(tensors) if t["name"] == "fc1.weight")
    swapped = tensors[w]["buffers"]["columnwise_data"]
    run("sibling: a weight copy's rowwise buffer swapped for its columnwise one is refused",
        [te_run, set_field(train, J("swap.teplan"), f"/profiles/0/tensors/{w}/buffers/data", swapped), "--inspect"], 3, "does not match")
    launches = mf["profiles"][0]["gpu"]["launches"]
    k = next(i for i, l in enumerate(launches) if l["kind"] == "kernel" and l["step"] == 0)
    scratch = next(i for i, b in enumerate(mf["profiles"][0]["buffers"]) if b["region"] == "scratch" and b["lifetime"][0] > launches[k]["step"])
    args = launches[k]["args"]
    slot = next(i for i, arg in enumerate(args) if isinstance(arg, dict) and "buffer" in arg)
    run("GPU side: a kernel argument pointing at a scratch buffer outside its lifetime is refused",
        [te_run, set_field(plan, J("gpu_life.teplan"), f"/profiles/0/gpu/launches/{k}/args/{slot}", {"buffer": scratch}), "--inspect"], 3,
        "outside its lifetime")
    g = next(i for i, l in enumerate(launches) if l["kind"] == "gemm") if any(l["kind"] == "gemm" for l in launches) else None
    if g is not None:
        run("GPU side: a GEMM's m doubled is refused", [te_run, set_field(plan, J("gemm_m.teplan"), f"/profiles/0/gpu/launches/{g}/gemm/m",
                                                                           launches[g]["gemm"]["m"] * 2), "--inspect"], 3, "GEMM")

    print("== 6. reads are bounded")
    for tool, args in [("te-run", [te_run, "/dev/zero", "--backend", "cpu"]), ("te-compile", [compile_, "/dev/zero"])]:
        start = time.time()
        run(f"{tool} /dev/zero is refused at once", args, 6, "not a regular file")
        check(f"  ... in {time.time() - start:.1f} s", time.time() - start < 10)
    run("sibling: --input x=/dev/zero is refused", [te_run, plan, "--backend", "cpu", "--input", "x=/dev/zero"], 6, "not a regular file")
    run("sibling: a weights file /dev/zero is refused",
        [compile_, graph("zero_weights.json", lambda g: g.update(weights={"file": "/dev/zero"}))], 6, "not a regular file")
    fifo = J("endless.json")
    os.mkfifo(fifo)
    stop = threading.Event()

    def feed():
        try:
            with open(fifo, "wb") as f:
                chunk = b" " * (1 << 20)
                while not stop.is_set():
                    f.write(chunk)
        except (BrokenPipeError, OSError):
            pass

    threading.Thread(target=feed, daemon=True).start()
    run("sibling: a pipe that never ends is read up to the graph limit", [compile_, fifo], 3, "goes on past the limit")
    stop.set()

    print("== 7. I/O and size problems are not internal errors")
    run("--input x=DIR is an I/O error", [te_run, plan, "--backend", "cpu", "--input", f"x={W}"], 6, "this path is a directory")
    open(J("a_file"), "w").close()
    run("--save-outputs naming a file is an I/O error", [te_run, plan, "--backend", "cpu", "--save-outputs", J("a_file")], 6, "not a folder"
        if False else "cannot create the folder")
    run("--save-outputs under /proc is an I/O error", [te_run, plan, "--backend", "cpu", "--save-outputs", "/proc/tec_nope"], 6, "cannot create")
    big = graph("bigF.json", lambda g: g["dims"].update(F=2147483648))
    run("a model too large for memory is a clear error before allocating", [compile_, big, "-o", J("big.teplan")], 7,
        "more than this machine's")
    run("sibling: a crafted 1 TiB arena on the CPU reference is a clear error",
        [te_run, set_field(set_field(plan, J("tib.teplan"), "/arena_bytes", 1 << 40), J("tib.teplan"), "/profiles/0/arena_bytes", 1 << 40),
         "--backend", "cpu"], 7, "the CPU reference's arena takes 1024.0 GiB")
    run("sibling: constants over the machine's memory (TEC_HOST_MEMORY_BYTES=1024)",
        [compile_, os.path.join(E, "mlp_tiny.json"), "-o", J("small_machine.teplan")], 7, "building the plan's constants",
        env=dict(os.environ, TEC_HOST_MEMORY_BYTES="1024"))
    run("sibling: -o naming a folder is an I/O error", [compile_, os.path.join(E, "mlp_tiny.json"), "-o", W], 6, "this path is a directory")
    run("sibling: -o in a missing folder is an I/O error", [compile_, os.path.join(E, "mlp_tiny.json"), "-o", J("no", "such", "p.teplan")], 6,
        "cannot create")
    run("sibling: --report where it cannot be written is an I/O error",
        [compile_, os.path.join(E, "mlp_tiny.json"), "--report", "/proc/tec_report.json"], 6, "cannot create")
    run("sibling: te-run --dot where it cannot be written is an I/O error", [te_run, plan, "--dot", "/proc/tec.dot"], 6, "cannot create")

    print("== 8. a weight dim that differs between profiles")
    run("--profiles F=256,512 -o names the dim and the weight", [compile_, os.path.join(E, "mlp_tiny.json"), "--profiles", "F=256,512", "-o",
                                                                 J("f.teplan")], 3, "weight 'fc1.weight' has shape [256, 64]")
    run("  ... and without -o too", [compile_, os.path.join(E, "mlp_tiny.json"), "--profiles", "F=256,512"], 3, "it follows F (256 and 512)")
    run("\"H\": [64, 128] names H", [compile_, graph("h2.json", lambda g: g["dims"].update(H=[64, 128]))], 3, "it follows H (64 and 128)")

    print("== 9. the smaller ones")
    model = os.path.join(E, "mlp.json")
    subprocess.run([compile_, model, "--shape", "T=16", "-q", "-o", J("warm.teplan")], check=True)  # fills the constants cache
    os.makedirs(J("sig"))
    caught = False
    for _ in range(5):
        p = subprocess.Popen([compile_, model, "--shape", "T=16", "-q", "-o", J("sig", "out.teplan")], stderr=subprocess.DEVNULL)
        while p.poll() is None:
            if any(".tmp." in f for f in os.listdir(J("sig"))):
                p.send_signal(signal.SIGTERM)
                caught = True
                break
            time.sleep(0.0005)
        p.wait()
        if caught:
            break
    check("SIGTERM during -o leaves no temporary file", caught and not any(".tmp." in f for f in os.listdir(J("sig"))),
          f"caught the write: {caught}; left: {os.listdir(J('sig'))}")
    stale = J("sig", "out.teplan.tmp.999999999.0")
    open(stale, "w").close()
    run("a temporary file a killed process left is removed by the next write",
        [compile_, os.path.join(E, "mlp_tiny.json"), "-q", "-o", J("sig", "out.teplan")], 0, "")
    check("  ... it is gone", not os.path.exists(stale))
    run("--shape T=32 --shape T=128 is refused", [compile_, os.path.join(E, "mlp_tiny.json"), "--shape", "T=32", "--shape", "T=128"], 2,
        "given twice")
    run("--profiles T=32 --shape T=128 is refused", [compile_, os.path.join(E, "mlp_tiny.json"), "--profiles", "T=32", "--shape", "T=128"], 2,
        "given twice")
    run("sibling: te-run --shape T=32 --shape T=32 is refused", [te_run, plan, "--backend", "cpu", "--shape", "T=32", "--shape", "T=32"], 2,
        "given twice")
    for seed in ["-1", str(2 ** 64), "1e23", "0x10", ""]:
        run(f"--seed {seed!r} is refused", [te_run, plan, "--backend", "cpu", "--seed", seed], 2, "--seed takes a whole number")
    run("--seed 5 runs", [te_run, plan, "--backend", "cpu", "--seed", "5"], 0, "y ")
    from onnx import helper as h
    init = numpy_helper.from_array(np.ones((16, 8), dtype=np.float32), "W")
    bad = h.make_model(h.make_graph([h.make_node("Gemm", ["x", "W"], ["y"], transB=1)], "g",
                                    [h.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]), h.make_tensor_value_info("W", TensorProto.FLOAT, [16, 4])],
                                    [h.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [init]),
                       opset_imports=[h.make_opsetid("", 17)])
    bad.ir_version = 8
    onnx.save(bad, J("init_input.onnx"))
    run("an ONNX initializer declared as an input of another shape is refused", [compile_, J("init_input.onnx")], 3,
        "is also an initializer, of type FLOAT and shape [16, 8], but the input declares type FLOAT and shape [16, 4]")
    print("== a whole causal LM's token ids (issue 50)")
    lm_model = os.path.join(a.source, "tests", "onnx", "hf_corpus", "llama_lm_ids.sdpa.dynamo.onnx")
    lm = J("lm.teplan")
    subprocess.run([compile_, lm_model, "-q", "-o", lm], check=True)
    ids = np.arange(32, dtype=np.int64).reshape(2, 16)
    for label, value, text in [("past the vocabulary", 256, "holds token id 256 at [1, 3], outside the table of embedding"),
                               ("negative", -1, "holds token id -1 at [1, 3], outside the table of embedding"),
                               ("past int32's exact floats", 2 ** 40, "integer value 1099511627776 at index 19 is outside (-2^24, 2^24)")]:
        bad_ids = ids.copy()
        bad_ids[1, 3] = value
        np.save(J("ids.npy"), bad_ids)
        run(f"a token id {label} is named with its index", [te_run, lm, "--backend", "cpu", "--input", f"input_ids={J('ids.npy')}"], 3, text)
    np.save(J("ids_float.npy"), ids.astype(np.float32))
    run("float token ids are refused", [te_run, lm, "--backend", "cpu", "--input", f"input_ids={J('ids_float.npy')}"], 3,
        "give int32 or int64 values (token ids")
    np.save(J("ids_short.npy"), ids[:, :8])
    run("token ids of another shape are refused", [te_run, lm, "--backend", "cpu", "--input", f"input_ids={J('ids_short.npy')}"], 3,
        "has shape [2, 16], the file holds [2, 8]")
    np.save(J("ids_ok.npy"), ids)
    run("token ids in range run", [te_run, lm, "--backend", "cpu", "--input", f"input_ids={J('ids_ok.npy')}"], 0, "logits")
    masked = J("lm_masked.teplan")
    subprocess.run([compile_, os.path.join(a.source, "tests", "onnx", "hf_corpus", "llama_lm.sdpa.dynamo.onnx"), "-q", "-o", masked],
                   check=True)
    np.save(J("ids_ok.npy"), ids)
    for label, row, text in [("left padding", [0, 0, 0] + [1] * 13, "holds 1 at [1, 3] after 0 leading ones"),
                             ("a hole", [1] * 5 + [0] + [1] * 10, "holds 1 at [1, 6] after 5 leading ones"),
                             ("a 2", [1, 2] + [0] * 14, "holds 2 at [1, 1] after 1 leading ones")]:
        mask = np.ones((2, 16), dtype=np.int64)
        mask[1] = row
        np.save(J("mask.npy"), mask)
        run(f"an attention_mask with {label} is named", [te_run, masked, "--backend", "cpu", "--input", f"input_ids={J('ids_ok.npy')}",
                                                         "--input", f"attention_mask={J('mask.npy')}"], 3, text)
    mask = np.ones((2, 16), dtype=np.int64)
    mask[1, 9:] = 0
    np.save(J("mask.npy"), mask)
    run("a right-padded attention_mask runs", [te_run, masked, "--backend", "cpu", "--input", f"input_ids={J('ids_ok.npy')}",
                                               "--input", f"attention_mask={J('mask.npy')}"], 0, "logits")
    np.save(J("mask_short.npy"), mask[:, :8])
    run("an attention_mask of another shape is refused", [te_run, masked, "--backend", "cpu", "--input",
                                                          f"attention_mask={J('mask_short.npy')}"], 3, "has shape [2, 16], the file holds [2, 8]")
    run("the LM runs on random inputs (whole sequences, ids over the vocabulary)", [te_run, masked, "--backend", "cpu"], 0, "logits")
    kv_model = os.path.join(a.source, "tests", "onnx", "hf_corpus", "llama_lm_kv.sdpa.dynamo.onnx")
    run("a KV cache export (use_cache=True) names its cache inputs", [compile_, kv_model, "-q", "-o", J("kv.teplan")], 4,
        "input 'past_key_values.0.key' is a KV cache (use_cache=True)")
    check("no plan is written for it", not os.path.exists(J("kv.teplan")))
    run("--no-onnx-patterns compiles the KV cache export as it is", [compile_, kv_model, "-q", "--no-onnx-patterns", "-o", J("kv.teplan")],
        0, "")
    ids_input = h.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])
    misuse = h.make_model(h.make_graph([h.make_node("Cast", ["ids"], ["f"], to=TensorProto.FLOAT),
                                        h.make_node("MatMul", ["f", "table_t"], ["y"])], "g", [ids_input],
                                       [h.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                                       [numpy_helper.from_array(np.ones((4, 8), dtype=np.float32), "table_t")]),
                          opset_imports=[h.make_opsetid("", 17)])
    misuse.ir_version = 8
    onnx.save(misuse, J("ids_misused.onnx"))
    run("an INT64 input cast to FLOAT compiles (the general path's convert)", [compile_, J("ids_misused.onnx"), "-q", "-o", J("ids.teplan")], 0, "")
    np.save(J("ids_big.npy"), np.array([[1, 2, 3, 2**40]] * 2, dtype=np.int64))
    run("an INT64 value past int32 is named when read", [te_run, J("ids.teplan"), "--backend", "cpu", "--input", f"ids={J('ids_big.npy')}"],
        3, "ids")
    run("te-compile DIR says it is a directory", [compile_, W], 6, "this path is a directory")
    run("a missing ONNX model says so", [compile_, J("missing.onnx")], 6, "cannot open ONNX model")

    print(f"\n{len(failures)} failure(s)")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
