#!/usr/bin/env python3
"""Training-step benchmark (issue 22): tec against the PyTorch peers on examples/mlp.json.

One training step - weights' copies from the fp32 masters (tec) / bf16 or FP8 weights (peers),
forward, backward from a given dy, no optimizer; and a second row with AdamW - of
y = x + fc2(gelu_tanh(fc1(layernorm(x)) + b1)) + b2, h=4096, ffn=16384, at T = 128, 2048, 8192,
in two configurations with the same semantics on both sides:
  write:      weight gradients written in bf16 (te-compile --wgrad write; PyTorch's .grad of
              bf16 parameters, set to None before each step);
  accumulate: added into fp32 main_grad (tec's default; the peers add .grad into an fp32
              buffer after backward).
Peers: PyTorch eager bf16 autograd; PyTorch FP8 autograd with per-tensor current scaling
(torch._scaled_mm forward and backward in a custom autograd.Function, E4M3 forward, E5M2
gradients, the weights' FP8 copies - rowwise and transposed - made once per step); both
captured in one CUDA graph by hand; torch.compile of both (default, and max-autotune when
--peers names it). tec runs each plan twice: every step remaking the weights' copies from the
fp32 masters (first_microbatch = 1, a full step), and reusing them (first_microbatch = 0, the
microbatches after the first; what bf16 parameters amount to). Every contender's dx and dW1 are checked against an fp64 autograd reference
(bounds as tec's part-1 tests: bf16 0.01, FP8 0.15). Medians of >= 100 CUDA-event-timed steps
after warm-up, inputs rotated over 4 (x, dy) pairs; peak memory is
torch.cuda.max_memory_allocated() over the peer's timed steps (parameters, masters, gradients
and activations included) against tec's arena + constants. The floor: FLOPs / the FP8 GEMM peak
measured here (torch._scaled_mm 8192x16384x4096), and at T=128 the step's own bytes / the
copy bandwidth measured here.

  bench/train_bench.py --out DIR [--build build-gpu] [--tokens 128,2048,8192] [--part floors,tec,peers] [--peers ...]
  bench/train_bench.py --out DIR --report        # the table again, from DIR's JSON
"""
import argparse, json, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench as fwd  # noqa: E402  the forward benchmark's weights, safetensors writer and timer

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None

H, FFN, ROOT = fwd.H, fwd.FFN, fwd.ROOT
BOUND = {"bf16": 0.01, "fp8": 0.15}  # ||g - g64|| / ||g64||, tests/fp64_train.h's kRecipeBounds
TEC_RECIPES = ["bf16", "fp8-current", "fp8-delayed", "fp8-block"]  # those that train on the GPU so far


def step_flops(t):
    return 3 * 2 * 2 * t * H * FFN  # two linears, each a forward, a dgrad and a wgrad GEMM


def step_bytes(t, config, adamw):
    """What one step must at least move: the masters read and the weights' copies written and
    read (FP8: two 1-byte copies), gradients written (bf16) or main_grad read and written
    (fp32), AdamW's moments and masters read and written, and the activations x, dy, dx and
    the saved hidden layer [T, FFN] once each way."""
    params = 2 * H * FFN
    weights = params * (4 + 2 + 2)
    grads = params * (2 if config == "write" else 8)
    optimizer = params * 4 * 6 if adamw else 0
    activations = t * H * 2 * 3 + t * FFN * 2 * 2
    return weights + grads + optimizer + activations


def data(t, count=4):
    """(x, dy) pairs; x as a leaf that wants its gradient: every contender computes dx, as tec does."""
    g = torch.Generator().manual_seed(fwd.SEED + t)
    return [(torch.randn([t, H], generator=g).to(torch.bfloat16), (torch.randn([t, H], generator=g) * 1e-2).to(torch.bfloat16))
            for _ in range(count)]


def reference64(w, x, dy):
    """fp64 autograd of the same step: dx and dW1 (the tensors every contender's check reads)."""
    p = {k: v.cuda().double().requires_grad_() for k, v in w.items()}
    x = x.cuda().double().requires_grad_()
    h = F.layer_norm(x, (H,), p["ln.weight"], p["ln.bias"], 1e-5)
    y = x + F.linear(F.gelu(F.linear(h, p["fc1.weight"], p["fc1.bias"]), approximate="tanh"), p["fc2.weight"], p["fc2.bias"])
    y.backward(dy.cuda().double())
    return {"dx": x.grad.cpu(), "dw1": p["fc1.weight"].grad.cpu()}  # on the host: the peers' memory is measured


def rel(got, want):
    got = got.detach().cpu().double()
    return float(torch.linalg.norm(got - want) / torch.linalg.norm(want))


# ---- the PyTorch peers ----
E4M3_MAX, E5M2_MAX = 448.0, 57344.0


def quantize(t, dtype, most):
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = most / amax
    return (t.float() * scale).clamp(-most, most).to(dtype), scale.reciprocal()


def fp8_linear_function():
    class Fp8Linear(torch.autograd.Function):
        """y = x W^T + b with per-tensor current scaling: E4M3 x and W forward (fast accumulation,
        TE's forward default), E5M2 dy backward (split accumulation); W's FP8 copies come in."""
        @staticmethod
        def forward(ctx, x, w, b, wq, wq_t, w_sinv):
            xq, xs = quantize(x, torch.float8_e4m3fn, E4M3_MAX)
            y = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=w_sinv, bias=b, out_dtype=torch.bfloat16, use_fast_accum=True)
            ctx.save_for_backward(xq, xs, wq_t, w_sinv)
            return y

        @staticmethod
        def backward(ctx, dy):
            xq, xs, wq_t, ws = ctx.saved_tensors
            dyq, dys = quantize(dy, torch.float8_e5m2, E5M2_MAX)
            dx = torch._scaled_mm(dyq, wq_t.t(), scale_a=dys, scale_b=ws, out_dtype=torch.bfloat16)
            dw = torch._scaled_mm(dyq.t().contiguous(), xq.t().contiguous().t(), scale_a=dys, scale_b=xs, out_dtype=torch.bfloat16)
            return dx, dw, dy.sum(0), None, None, None
    return Fp8Linear


def mlp_bf16(x, ln_w, ln_b, w1, b1, w2, b2):
    h = F.layer_norm(x, (H,), ln_w, ln_b, 1e-5)
    return x + F.linear(F.gelu(F.linear(h, w1, b1), approximate="tanh"), w2, b2)


def mlp_fp8(x, ln_w, ln_b, w1, b1, w2, b2):
    h = F.layer_norm(x, (H,), ln_w, ln_b, 1e-5)
    copies = []
    with torch.no_grad():  # the weights' FP8 copies, rowwise and transposed, once per step
        for w in (w1, w2):
            q, s = quantize(w, torch.float8_e4m3fn, E4M3_MAX)
            copies.append((q, q.t().contiguous(), s))
    a = F.gelu(FP8_LINEAR[0].apply(h, w1, b1, *copies[0]), approximate="tanh")
    return x + FP8_LINEAR[0].apply(a, w2, b2, *copies[1])


FORWARD = {"bf16": mlp_bf16, "fp8": mlp_fp8}
FP8_LINEAR = []  # the autograd.Function, made once PyTorch is imported
COMPILED = {}  # (kind, mode) -> torch.compile of the forward; it recompiles per shape (dynamic=False)


class Peer:
    """One PyTorch training step: bf16 parameters (from fp32 masters with AdamW), forward,
    backward, then per configuration .grad written or added into an fp32 main_grad, and AdamW."""

    def __init__(self, w, kind, config, adamw):
        self.kind, self.config, self.adamw = kind, config, adamw
        self.params = [w[k].cuda().clone().requires_grad_() for k in ("ln.weight", "ln.bias", "fc1.weight", "fc1.bias", "fc2.weight",
                                                                         "fc2.bias")]
        self.main = [torch.zeros(p.shape, dtype=torch.float32, device="cuda") for p in self.params] if config == "accumulate" or adamw else []
        if adamw:
            self.masters = [p.detach().float().clone().requires_grad_() for p in self.params]
            self.optimizer = torch.optim.AdamW(self.masters, lr=1e-3, weight_decay=0.01, fused=True, capturable=True)
        self.forward = FORWARD[kind]


    def step(self, x, dy):
        if self.adamw:
            with torch.no_grad():
                for p, m in zip(self.params, self.masters):
                    p.copy_(m)
        for p in self.params:
            p.grad = None
        x.grad = None
        y = self.forward(x, *self.params)
        y.backward(dy)
        if self.main:
            with torch.no_grad():
                for p, m in zip(self.params, self.main):
                    m.add_(p.grad)
        if self.adamw:
            for m, g in zip(self.masters, self.main):
                m.grad = g
            self.optimizer.step()
            for g in self.main:
                g.zero_()
        return y


def hand_graph(peer, pairs):
    static_x, static_dy = pairs[0][0].detach().clone().requires_grad_(), pairs[0][1].clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            peer.step(static_x, static_dy)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        peer.step(static_x, static_dy)

    def run(pair):
        with torch.no_grad():
            static_x.copy_(pair[0])
        static_dy.copy_(pair[1])
        graph.replay()
    return run


def run_peers(out, w, tokens, configs, names):
    results = []
    for t in tokens:
        pairs = [(x.cuda().requires_grad_(), dy.cuda()) for x, dy in data(t)]
        ref = reference64(w, pairs[0][0].detach(), pairs[0][1])
        pair_bytes = 2 * 2 * t * H  # one (x, dy) pair in bf16: what tec's arena holds of the inputs
        for config, adamw in configs:
            for name in names:
                kind = name.split()[-1]
                torch.cuda.empty_cache()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                compile_s = None
                try:
                    peer = Peer(w, kind, config, adamw)
                    if not name.startswith(("eager", "graph")):
                        mode = "max-autotune" if name.startswith("max") else "default"
                        if (kind, mode) not in COMPILED:
                            COMPILED[kind, mode] = torch.compile(FORWARD[kind], mode=mode, dynamic=False)
                        peer.forward = COMPILED[kind, mode]
                        # The first step at this shape compiles it (then cached for the other
                        # configurations): on a throwaway peer, so that the check below is a
                        # first step from the initial weights.
                        warm = Peer(w, kind, "write", False)
                        warm.forward = COMPILED[kind, mode]
                        started = time.time()
                        warm.step(*pairs[1])
                        torch.cuda.synchronize()
                        compile_s = time.time() - started
                        warm = None
                    # The check: one step on the first pair, its dx and dW1 (.grad, in every configuration).
                    peer.step(*pairs[0])
                    err = max(rel(pairs[0][0].grad, ref["dx"]), rel(peer.params[2].grad, ref["dw1"]))
                    fn = hand_graph(peer, pairs) if name.startswith("graph") else (lambda pair, p=peer: p.step(*pair))
                    us = fwd.time_cuda(fn, pairs, iters=100, warmup=10)
                except Exception as e:  # a peer that cannot run this configuration says why, the rest go on
                    row = {"contender": name, "T": t, "config": config, "adamw": adamw, "error_text": f"{type(e).__name__}: {e}"[:300]}
                    print(json.dumps(row), flush=True)
                    results.append(row)
                    peer = fn = None
                    continue
                row = {"contender": name, "T": t, "config": config, "adamw": adamw, "us": us, "error": err, "bound": BOUND[kind],
                       "ok": err <= BOUND[kind], "peak_bytes": torch.cuda.max_memory_allocated() - base + pair_bytes}
                if compile_s is not None:
                    row["compile_s"] = compile_s
                print(json.dumps(row), flush=True)
                results.append(row)
                peer = fn = None
                with open(out / "train-peers.json", "w") as f:
                    json.dump(results, f, indent=1)


PEERS = ["eager bf16", "eager fp8", "graph bf16", "graph fp8", "compile bf16", "compile fp8", "max-autotune bf16", "max-autotune fp8"]


def run_tec(out, w, tokens, configs, build, recipes):
    import numpy as np
    fwd.write_bench_graph(out, tokens)
    results = []
    for t in tokens:
        x, dy = data(t)[0]
        np.save(out / f"x{t}.npy", x.float().numpy())
        np.save(out / f"dy{t}.npy", dy.float().numpy())
        ref = reference64(w, x, dy)
        for recipe in recipes:
            for config, adamw in configs:
                plan = out / f"train.{recipe}.{t}.{config}{'.adamw' if adamw else ''}.teplan"
                started = time.time()
                fwd.run_tool([build / "cli/te-compile", out / "mlp_bench.json", "-o", plan, "--recipe", recipe, "--shape", f"T={t}", "-q",
                          "--mode", "train", "--wgrad", config] + (["--optimizer", "adamw"] if adamw else []))
                compile_s = time.time() - started
                report = out / f"{plan.stem}.json"
                saved = out / f"{plan.stem}.outputs"
                fwd.run_tool([build / "cli/te-run", plan, "--iterations", "100", "--warmup", "10", "--input", f"x={out}/x{t}.npy",
                          "--input", f"dy={out}/dy{t}.npy", "--json", report, "--save-outputs", saved] +
                         ([] if adamw else ["--profile"]), stdout=subprocess.DEVNULL)
                r = json.loads(report.read_text())
                if not adamw:  # later microbatches (first_microbatch = 0): the weights' copies reused, as bf16 parameters are
                    reused = out / f"{plan.stem}.reused.json"
                    fwd.run_tool([build / "cli/te-run", plan, "--iterations", "100", "--warmup", "10", "--input", f"x={out}/x{t}.npy",
                              "--input", f"dy={out}/dy{t}.npy", "--json", reused, "--scalar", "first_microbatch=0"],
                             stdout=subprocess.DEVNULL)
                    rr = json.loads(reused.read_text())
                    results.append({"contender": f"tec {recipe} (copies reused)", "T": t, "config": config, "adamw": adamw,
                                    "us": rr["graph"]["p50_us"], "peak_bytes": rr["arena_bytes"] + rr["constant_bytes"]})
                    print(json.dumps(results[-1]), flush=True)
                row = {"contender": f"tec {recipe}", "T": t, "config": config, "adamw": adamw, "us": r["graph"]["p50_us"],
                       "peak_bytes": r["arena_bytes"] + r["constant_bytes"], "compile_s": compile_s}
                if "phases_us" in r:
                    row["phases_us"] = r["phases_us"]
                if config == "write" and not adamw:  # one step's gradients, written: the check
                    dx = torch.from_numpy(np.load(saved / "dx.npy")).cuda()
                    dw1 = torch.from_numpy(np.load(saved / "fc1.weight.grad.npy")).cuda()
                    row["error"] = max(rel(dx, ref["dx"]), rel(dw1, ref["dw1"]))
                    row["bound"] = BOUND["bf16" if recipe == "bf16" else "fp8"]
                    row["ok"] = row["error"] <= row["bound"]
                print(json.dumps(row), flush=True)
                results.append(row)
                plan.unlink()
                with open(out / f"train-tec{'' if recipes == TEC_RECIPES else '-' + '-'.join(recipes)}.json", "w") as f:
                    json.dump(results, f, indent=1)


def measure_floors(out):
    """The FP8 GEMM peak (torch._scaled_mm, 8192 x 16384 x 4096, fast accumulation) and the copy
    bandwidth (1 GiB device-to-device), each the median of 50 runs."""
    a = torch.randn(8192, 4096, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(16384, 4096, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    us = fwd.time_cuda(lambda _: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True),
                       [None], iters=50, warmup=10)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_us = fwd.time_cuda(lambda _: dst.copy_(src), [None], iters=50, warmup=5)
    floors = {"fp8_flops_per_s": 2 * 8192 * 16384 * 4096 / (us * 1e-6), "copy_bytes_per_s": 2 * (1 << 30) / (copy_us * 1e-6)}
    (out / "train-floors.json").write_text(json.dumps(floors, indent=1))
    print(json.dumps(floors), flush=True)


def report(out):
    rows = []
    for path in sorted(out.glob("train-tec*.json")) + sorted(out.glob("train-peers*.json")):
        rows += json.loads(path.read_text())
    floors = json.loads((out / "train-floors.json").read_text())
    tokens = sorted({r["T"] for r in rows})
    lines = []
    for config, adamw in sorted({(r["config"], r["adamw"]) for r in rows}):
        lines.append(f"\nconfig: weight gradients {config}{', AdamW' if adamw else ''}  (median us; x best peer; x floor; peak MiB)")
        lines.append(f"{'contender':<22}" + "".join(f"{'T=' + str(t):>40}" for t in tokens))
        sel = [r for r in rows if r["config"] == config and r["adamw"] == adamw]
        best = {}
        for t in tokens:
            ok = [r for r in sel if r["T"] == t and not r["contender"].startswith("tec") and r.get("ok")]
            best[t] = min(ok, key=lambda r: r["us"]) if ok else None
        for c in sorted({r["contender"] for r in sel}, key=lambda c: (not c.startswith("tec"), c)):
            line = f"{c:<22}"
            for t in tokens:
                r = next((r for r in sel if r["contender"] == c and r["T"] == t), None)
                if not r or "us" not in r:
                    line += f"{('failed' if r else '-'):>40}"
                    continue
                floor = max(step_flops(t) / floors["fp8_flops_per_s"],
                            step_bytes(t, config, adamw) / floors["copy_bytes_per_s"]) * 1e6
                ratio = r["us"] / best[t]["us"] if best[t] else float("nan")
                mark = "" if r.get("ok", True) else "!"
                line += f"{r['us']:>11.1f}{mark:1}{ratio:>7.2f}x{r['us'] / floor:>7.2f}f{r['peak_bytes'] / 2**20:>10.0f}MiB"
            lines.append(line)
        lines.append("best peer: " + ", ".join(f"T={t} {best[t]['contender']} {best[t]['us']:.1f} us" for t in tokens if best[t]))
    lines.append("\nfloor = max(step FLOPs / measured FP8 GEMM peak %.0f TFLOP/s, step bytes / measured copy bandwidth %.2f TB/s);"
                 " '!' = outside its error bound; tec's error is checked in the write config"
                 % (floors["fp8_flops_per_s"] / 1e12, floors["copy_bytes_per_s"] / 1e12))
    errors = [f"{r['contender']} T={r['T']} {r['config']}: {r['error_text']}" for r in rows if "error_text" in r]
    if errors:
        lines.append("failed: " + "; ".join(errors))
    compile_s = {}
    for r in rows:  # the first configuration at a shape compiles; the others reuse it
        if "compile_s" in r:
            compile_s[r["contender"], r["T"]] = max(compile_s.get((r["contender"], r["T"]), 0), r["compile_s"])
    lines.append("compile times (s): " + ", ".join(f"{c} T={t} {v:.1f}" for (c, t), v in sorted(compile_s.items())))
    phases = [f"T={r['T']} {r['contender']} {r['config']}: " + " ".join(f"{k} {v:.0f}" for k, v in r["phases_us"].items())
              for r in rows if "phases_us" in r]
    lines.append("tec per phase (eager step medians, us): " + "; ".join(phases))
    text = "\n".join(lines)
    print(text)
    (out / "train-table.txt").write_text(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--build", type=Path, default=ROOT / "build-gpu")
    ap.add_argument("--tokens", default="128,2048,8192")
    ap.add_argument("--part", default="floors,tec,peers", help="comma-separated: floors, tec, peers")
    ap.add_argument("--configs", default="write,accumulate,accumulate+adamw")
    ap.add_argument("--recipes", default=",".join(TEC_RECIPES), help="tec's recipes (comma-separated)")
    ap.add_argument("--peers", default=",".join(PEERS[:6]),
                    help="comma-separated, of: " + ", ".join(PEERS) + " (default: all but max-autotune, which takes minutes per shape)")
    ap.add_argument("--report", action="store_true", help="print the table from --out's JSON and exit")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.report:
        return report(a.out)
    if torch is None or not torch.cuda.is_available():
        sys.exit("train_bench.py: needs PyTorch with CUDA (the GPU machine)")
    tokens = [int(t) for t in a.tokens.split(",")]
    configs = [(c.split("+")[0], c.endswith("+adamw")) for c in a.configs.split(",")]
    FP8_LINEAR.append(fp8_linear_function())
    w = fwd.weights()
    fwd.write_safetensors(a.out / "weights.safetensors", w)
    parts = a.part.split(",")
    if "floors" in parts:
        measure_floors(a.out)
    if "tec" in parts:
        run_tec(a.out, w, tokens, configs, a.build, [r for r in a.recipes.split(",") if r])
    if "peers" in parts:
        run_peers(a.out, w, tokens, configs, [p for p in a.peers.split(",") if p])
    report(a.out)


if __name__ == "__main__":
    main()
