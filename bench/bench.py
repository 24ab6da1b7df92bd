#!/usr/bin/env python3
"""Side-by-side benchmark of tec against the PyTorch peers on examples/mlp.json (issue 6).

y = x + fc2(gelu_tanh(fc1(layernorm(x)) + b1)) + b2, h=4096, ffn=16384, bf16 activations,
T in {16, 128, 2048, 8192}; every contender uses the same seeded weights (one safetensors
file) and the same inputs. Each timing is the median of >= 100 runs after warm-up, with CUDA
events, inputs rotated over 4 buffers; every contender's output is checked against an fp64
reference. Runs on the GPU machine (PyTorch 2.11), all of it in one call:

  bench/bench.py --out DIR --all --tune            # tec plans, every peer, table, JSON, plot

torch.compile(max-autotune) takes minutes per shape when Inductor's cache is cold, more than
one device call allows for both peers; fill the cache first (TORCHINDUCTOR_CACHE_DIR), one
call per peer, and the --all call then loads the autotuned kernels:

  bench/bench.py --out DIR --part compile-fp8 --compile-only
  bench/bench.py --out DIR --part compile-bf16 --compile-only
"""
import argparse, json, subprocess, struct, sys, time
from pathlib import Path

try:  # --report alone runs without PyTorch, e.g. on the CPU machine over a copied --out folder
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None

H, FFN = 4096, 16384
TOKENS = [16, 128, 2048, 8192]
SEED = 1234
ROOT = Path(__file__).resolve().parent.parent
E4M3_MAX = 448.0
# ||y - y64|| / ||y - x||_64 bounds on the MLP branch, per recipe (tests/fp64_model.h's).
BOUND = {"bf16": 0.01, "fp8": 0.08}
FLOOR_BW, FLOOR_FLOPS = 3.0e12, 1.5e15  # H100 SXM: ~3.0 TB/s achievable, ~1.5 PFLOP/s dense FP8


def weights():
    g = torch.Generator().manual_seed(SEED)
    def n(shape, std, mean=0.0):
        return (torch.randn(shape, generator=g) * std + mean).to(torch.bfloat16)
    return {
        "ln.weight": n([H], 0.1, 1.0), "ln.bias": n([H], 0.02),
        "fc1.weight": n([FFN, H], H ** -0.5), "fc1.bias": n([FFN], 0.02),
        "fc2.weight": n([H, FFN], FFN ** -0.5), "fc2.bias": n([H], 0.02),
    }


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def inputs(t, count=4):
    g = torch.Generator().manual_seed(SEED + t)
    return [torch.randn([t, H], generator=g).to(torch.bfloat16) for _ in range(count)]


def reference64(w, x):
    d = {k: v.cuda().double() for k, v in w.items()}
    x = x.cuda().double()
    h = F.layer_norm(x, (H,), d["ln.weight"], d["ln.bias"], 1e-5)
    a = F.gelu(h @ d["fc1.weight"].T + d["fc1.bias"], approximate="tanh")
    return x + a @ d["fc2.weight"].T + d["fc2.bias"]


def branch_error(y, x, ref):
    x = x.cuda().double()
    return (float(torch.linalg.norm(y.cuda().double() - ref)) / float(torch.linalg.norm(ref - x)))


def time_cuda(fn, xs, iters=200, warmup=20):
    for i in range(warmup):
        fn(xs[i % len(xs)])
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stop = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        start[i].record()
        fn(xs[i % len(xs)])
        stop[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1000 for s, e in zip(start, stop))
    return times[len(times) // 2]


# ---- the PyTorch peers ----
def quantize_current(t):
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    return (t.float() * scale).to(torch.float8_e4m3fn), scale.reciprocal()


def peer_modules(w):
    """The eager modules, defined here so that the file imports without PyTorch."""
    class Bf16Mlp(torch.nn.Module):
        def __init__(self, w):
            super().__init__()
            for k, v in w.items():
                self.register_buffer(k.replace(".", "_"), v.cuda())

        def forward(self, x):
            h = F.layer_norm(x, (H,), self.ln_weight, self.ln_bias, 1e-5)
            a = F.gelu(F.linear(h, self.fc1_weight, self.fc1_bias), approximate="tanh")
            return x + F.linear(a, self.fc2_weight, self.fc2_bias)

    class Fp8Mlp(torch.nn.Module):
        """Per-tensor current scaling: amax -> scale -> cast e4m3 -> torch._scaled_mm with bias;
        weights pre-quantized once."""
        def __init__(self, w):
            super().__init__()
            self.register_buffer("ln_weight", w["ln.weight"].cuda())
            self.register_buffer("ln_bias", w["ln.bias"].cuda())
            for name in ("fc1", "fc2"):
                q, s = quantize_current(w[name + ".weight"].cuda())
                self.register_buffer(name + "_w", q)
                self.register_buffer(name + "_s", s)
                self.register_buffer(name + "_b", w[name + ".bias"].cuda())

        def forward(self, x):
            h = F.layer_norm(x, (H,), self.ln_weight, self.ln_bias, 1e-5)
            h8, hs = quantize_current(h)
            a = torch._scaled_mm(h8, self.fc1_w.t(), scale_a=hs, scale_b=self.fc1_s, bias=self.fc1_b, out_dtype=torch.bfloat16)
            a = F.gelu(a, approximate="tanh")
            a8, as_ = quantize_current(a)
            return x + torch._scaled_mm(a8, self.fc2_w.t(), scale_a=as_, scale_b=self.fc2_s, bias=self.fc2_b,
                                        out_dtype=torch.bfloat16)

    return {"bf16": Bf16Mlp(w).eval(), "fp8": Fp8Mlp(w).eval()}


def hand_graph(module, xs):
    static_x = xs[0].clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            module(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = module(static_x)

    def run(x):
        static_x.copy_(x)
        graph.replay()
        return static_y
    return run


def run_peers(out, w, names, tokens, compile_only=False):
    results = []
    mods = peer_modules(w)
    for t in tokens:
        xs = [x.cuda() for x in inputs(t)]
        ref = reference64(w, xs[0])
        for name in names:
            kind = "fp8" if "fp8" in name else "bf16"
            m = mods[kind]
            with torch.no_grad():
                if name.startswith("eager"):
                    fn = m
                elif name.startswith("graph"):
                    fn = hand_graph(m, xs)
                else:
                    started = time.time()
                    # One static compile per shape, as a user deploying one shape would get;
                    # dynamo would otherwise switch to a dynamic-shape kernel at the second T.
                    torch._dynamo.reset()
                    compiled = torch.compile(m, mode="max-autotune", dynamic=False)
                    compiled(xs[0])
                    torch.cuda.synchronize()
                    compile_s = time.time() - started
                    fn = compiled
                    if compile_only:
                        print(json.dumps({"contender": name, "T": t, "compile_s": compile_s, "cache_filled": True}), flush=True)
                        with open(out / f"compile-times-{name.replace(' ', '_')}.json", "a") as f:
                            f.write(json.dumps({"T": t, "compile_s": compile_s}) + "\n")
                        continue
                y = fn(xs[0]).clone()
                us = time_cuda(fn, xs)
            err = branch_error(y, xs[0], ref)
            row = {"contender": name, "T": t, "us": us, "error": err, "bound": BOUND[kind], "ok": err <= BOUND[kind]}
            if name.startswith("compile"):
                row["compile_s"] = compile_s
            print(json.dumps(row), flush=True)
            results.append(row)
            # Written after every row: a part cut short by the device's time limit keeps what it measured.
            with open(out / ("peers-" + "-".join(n.replace(" ", "_") for n in names) + ".json"), "w") as f:
                json.dump(results, f, indent=1)


def run_tool(cmd, **kwargs):
    """A te-compile / te-run step; on failure, says which one (its own message is above) and stops."""
    done = subprocess.run([str(c) for c in cmd], **kwargs)
    if done.returncode != 0:
        sys.exit(f"bench.py: {' '.join(str(c) for c in cmd)}\n  failed with exit code {done.returncode} (its message is above)")


def write_bench_graph(out, tokens):
    """out/mlp_bench.json: examples/mlp.json with these T profiles, reading out/weights.safetensors."""
    graph = json.loads((ROOT / "examples" / "mlp.json").read_text())
    graph["dims"]["T"] = tokens
    graph["weights"] = {"file": "weights.safetensors"}
    graph.pop("$schema", None)
    (out / "mlp_bench.json").write_text(json.dumps(graph, indent=1))


def run_tec(out, w, tokens, recipes, build, tune):
    import numpy as np
    for tool in ("te-compile", "te-run"):
        if not (build / "cli" / tool).is_file():
            sys.exit(f"bench.py: no {build / 'cli' / tool}: build tec first, or name its build folder with --build")
    write_bench_graph(out, tokens)
    results = []
    for recipe in recipes:
        for t in tokens:
            # One plan per T, as max-autotune compiles per shape: in a plan with several T the
            # profiles share the weights, so the small-T GEMMs read them row-major (README).
            plan = out / f"mlp.{recipe}.{t}.teplan"
            started = time.time()
            run_tool([build / "cli/te-compile", out / "mlp_bench.json", "-o", plan, "--recipe", recipe, "--shape",
                      f"T={t}", "-q"] + (["--tune"] if tune else []))
            print(f"te-compile {recipe} T={t}{' --tune' if tune else ''}: {time.time() - started:.1f} s", flush=True)
            x = inputs(t)[0]
            np.save(out / f"x{t}.npy", x.float().numpy())
            report = out / f"tec.{recipe}.{t}.json"
            saved = out / f"y.{recipe}.{t}"
            # Four sessions in turn: the same input rotation as the peers get.
            run_tool([build / "cli/te-run", plan, "--shape", f"T={t}", "--iterations", "200", "--warmup", "20",
                      "--rotate", "4", "--input", f"x={out}/x{t}.npy", "--json", report, "--save-outputs", saved],
                     stdout=subprocess.DEVNULL)
            if recipe.startswith("fp8") and t <= 128:  # where the targets are missed: keep the step profile
                with open(out / f"profile.{recipe}.{t}.txt", "w") as f:
                    run_tool([build / "cli/te-run", plan, "--shape", f"T={t}", "--iterations", "100", "--profile"], stdout=f)
            r = json.loads(report.read_text())
            y = torch.from_numpy(np.load(saved / "y.npy"))
            kind = "bf16" if recipe == "bf16" else "fp8"
            err = branch_error(y, x, reference64(w, x))
            row = {"contender": f"tec {recipe}", "T": t, "us": r["graph"]["p50_us"], "error": err, "bound": BOUND[kind],
                   "ok": err <= BOUND[kind]}
            print(json.dumps(row), flush=True)
            results.append(row)
    with open(out / "tec.json", "w") as f:
        json.dump(results, f, indent=1)


def floor_us(t):
    weight_bytes = 2 * H * FFN  # FP8
    io_bytes = 2 * 2 * t * H
    flops = 2 * 2 * t * H * FFN
    return max((weight_bytes + io_bytes) / FLOOR_BW, flops / FLOOR_FLOPS) * 1e6


def report(out):
    rows = []
    for p in sorted(out.glob("*.json")):
        if p.name.startswith(("peers-", "tec.json")):
            rows += json.loads(p.read_text())
    if not rows:
        sys.exit(f"bench.py: no results in {out} (tec.json, peers-*.json): run a --part there first")
    contenders = sorted({r["contender"] for r in rows}, key=lambda c: (not c.startswith("tec"), c))
    peers = [c for c in contenders if not c.startswith("tec")]
    best = {t: min((r for r in rows if r["T"] == t and r["contender"] in peers and r["ok"]), key=lambda r: r["us"], default=None)
            for t in TOKENS}
    print(f"{'contender':<26}" + "".join(f"{'T=' + str(t):>34}" for t in TOKENS))
    print(f"{'':<26}" + "".join(f"{'us  TFLOP/s  x best  x floor':>34}" for t in TOKENS))
    table = []
    for c in contenders:
        line = f"{c:<26}"
        for t in TOKENS:
            r = next((r for r in rows if r["contender"] == c and r["T"] == t), None)
            if not r:
                line += f"{'-':>34}"
                continue
            tflops = 2 * 2 * t * H * FFN / (r["us"] * 1e-6) / 1e12
            ratio = r["us"] / best[t]["us"] if best[t] else float("nan")
            fl = r["us"] / floor_us(t)
            mark = "" if r["ok"] else "!"
            line += f"{r['us']:>10.1f}{mark:1}{tflops:>8.0f}{ratio:>8.2f}{fl:>8.2f}"
            table.append({**r, "tflops": tflops, "ratio_to_best_peer": ratio, "ratio_to_floor": fl})
        print(line)
    print("best peer: " + ", ".join(f"T={t} {best[t]['contender']} {best[t]['us']:.1f} us" for t in TOKENS if best[t]))
    print("floor (us): " + ", ".join(f"T={t} {floor_us(t):.1f}" for t in TOKENS) + "   ('!' = outside its error bound)")
    compiles = [r for r in rows if "compile_s" in r]
    if compiles:
        print("torch.compile time in this run (s; from Inductor's cache when it was filled first): " +
              ", ".join(f"{r['contender']} T={r['T']} {r['compile_s']:.1f}" for r in compiles))
    for p in sorted(out.glob("compile-times-*.json")):
        print(f"{p.stem[len('compile-times-'):]} cold (cache-filling) compile (s): " +
              ", ".join(f"T={j['T']} {j['compile_s']:.1f}" for j in map(json.loads, p.read_text().splitlines())))
    (out / "results.json").write_text(json.dumps({"rows": table, "floor_us": {t: floor_us(t) for t in TOKENS}}, indent=1))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 5))
        for c in contenders:
            pts = sorted((r["T"], r["us"]) for r in rows if r["contender"] == c)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=c, linewidth=2.5 if c.startswith("tec") else 1)
        ax.plot(TOKENS, [floor_us(t) for t in TOKENS], "k--", label="floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens T")
        ax.set_ylabel("median latency (us)")
        ax.set_title("examples/mlp.json on H100")
        ax.legend(fontsize=8)
        fig.savefig(out / "latency.png", dpi=120, bbox_inches="tight")
        print(f"wrote {out / 'results.json'} and {out / 'latency.png'}")
    except ImportError:
        print("matplotlib missing: no plot")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True,
                    help="results folder: weights, plans, per-part JSON, then results.json and latency.png")
    ap.add_argument("--part", default="", help="comma list of what to run: tec (te-compile + te-run per recipe and T), "
                    "eager (eager and hand-graphed peers), compile-fp8, compile-bf16 (torch.compile max-autotune)")
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="comma list of T (default %(default)s)")
    ap.add_argument("--recipes", default="bf16,fp8-current,fp8-delayed,fp8-block", help="tec recipes (default %(default)s)")
    ap.add_argument("--build", type=Path, default=ROOT / "build-gpu", help="tec build folder with cli/te-compile and "
                    "cli/te-run (default %(default)s)")
    ap.add_argument("--report", action="store_true", help="print the table of every result in --out and write "
                    "results.json and latency.png (needs neither PyTorch nor a GPU)")
    ap.add_argument("--all", action="store_true", help="every part, then the report (one device call)")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile parts: only compile (fills Inductor's cache for a later --all), no timing")
    ap.add_argument("--tune", action="store_true", help="compile tec's plans with te-compile --tune (timed GEMM algorithms)")
    a = ap.parse_args()
    parts = [p for p in a.part.split(",") if p]
    if a.all:
        parts, a.report = ["tec", "eager", "compile-fp8", "compile-bf16"], True
    known = ("tec", "eager", "compile-fp8", "compile-bf16")
    if unknown := [p for p in parts if p not in known]:
        ap.error(f"--part {','.join(unknown)}: expected a comma list of {', '.join(known)}")
    if not parts and not a.report:
        ap.error("nothing to do: give --all, --part or --report")
    try:
        tokens = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        ap.error(f"--tokens {a.tokens}: expected a comma list of integers, e.g. 16,128")
    if parts:
        if torch is None:
            sys.exit(f"bench.py: --part {','.join(parts)} needs PyTorch (the device image has it); "
                     "this Python has none. --report alone runs without it.")
        if not torch.cuda.is_available():
            sys.exit(f"bench.py: --part {','.join(parts)} needs a CUDA GPU; PyTorch sees none here. "
                     "--report alone runs without one.")
    if parts:
        a.out.mkdir(parents=True, exist_ok=True)
        w = weights()
        if not (a.out / "weights.safetensors").exists():
            write_safetensors(a.out / "weights.safetensors", w)
    if "tec" in parts:
        run_tec(a.out, w, tokens, a.recipes.split(","), a.build, a.tune)
    if "eager" in parts:
        run_peers(a.out, w, ["eager bf16", "eager fp8", "graph bf16", "graph fp8"], tokens)
    if "compile-fp8" in parts:
        run_peers(a.out, w, ["compile fp8"], tokens, a.compile_only)
    if "compile-bf16" in parts:
        run_peers(a.out, w, ["compile bf16"], tokens, a.compile_only)
    if a.report:
        report(a.out)


if __name__ == "__main__":
    main()
