#!/usr/bin/env python3
"""MoE layer benchmark (issue 23): tec against the PyTorch peers on examples/moe.json's layer.

y = x + sum_j w_j * expert_{e_j}(rmsnorm(x)), expert = SwiGLU MLP h=4096 -> 2 x 14336 -> 4096,
8 experts, top-2, bf16 activations, T = 256, 2048, 8192. The routing is given (the same
expert indices and weights for every contender), uniform or skewed (expert 0 takes half the
tokens), so that every contender does the same work; the router's own cost is measured apart
(tec's examples/moe.json with its router, "router" rows). Contenders:
  tec bf16 / fp8-current   the plan of out/moe_routed.json (examples/moe.json with the routing as
                           inputs): routing kernel, permute + quantize, tec's grouped GEMMs
                           reading m_splits on the device, SwiGLU, unpermute, one CUDA graph;
  loop bf16                PyTorch eager: sort the slots by expert, one GEMM pair per expert
                           (sizes from the host: .tolist() synchronises), index_add back;
  loop fp8                 the same with torch._scaled_mm, per-tensor current scaling per expert
                           (E4M3, rows padded to 16), weights pre-quantized per expert;
  compile bf16             torch.compile of the expert MLP (dynamic shapes), the loop in Python;
  padded bf16 (+graph)     capacity factor 1.25: tokens scattered into [E, C, H] without host
                           synchronisation, two bmm, gathered back; dropped slots make it wrong
                           under skew (its error says so); also captured in a CUDA graph by hand.
The training step (--part train, train-peers): forward and backward with the given routing and
a random dy, wgrad accumulated (tec: into main_grad; PyTorch: into .grad, each expert its own
weight parameters as TE's GroupedLinear keeps them): tec's train plan of the same graph
(--mode train) against the loop (bf16 autograd), torch.compile of the expert MLP and the padded
bmm layer (autograd). FP8 has no PyTorch training peer here: torch._scaled_mm has no backward.
tec's training rows also say where the step's time goes (te-run --profile in the same run: the
phases' sums and the largest steps, eager step medians).
Each timing is the median of 100 CUDA-event-timed runs after 10 warm-up runs (training: 20 after 5). Every peer's
branch (y - x) is checked against an fp32 computation of the same routing and weights (bf16
0.01, FP8 0.08). tec's weights are its own seeded random ones (same distribution), checked by
tests/gpu (moe group) against the CPU reference. Floors: FLOPs / peak (bf16 800, FP8 1600
TFLOP/s dense, H100 SXM) and weight bytes / 3.0 TB/s. The grouped GEMMs against one dense GEMM
of the same FLOPs: tec's fc1(+act) + fc2 step times (te-run --profile) against torch.mm /
torch._scaled_mm of [T k, 4096] x [4096, 28672] and [T k, 14336] x [14336, 4096].

  bench/moe_bench.py --out DIR [--build .carry/gpu] [--tokens 256,2048,8192] [--part tec,router,peers,dense,train,train-peers]
                     [--routings uniform,skewed]
  bench/moe_bench.py --out DIR --report        # the table again, from DIR's JSON
"""
import argparse, json, math, subprocess, sys, time
from pathlib import Path

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None

ROOT = Path(__file__).resolve().parent.parent
H, E, FFN, K = 4096, 8, 14336, 2
E4M3_MAX = 448.0
BOUND = {"bf16": 0.01, "fp8": 0.08}
PEAK = {"bf16": 800e12, "fp8": 1600e12}
BANDWIDTH = 3.0e12


def run_tool(cmd, **kwargs):
    done = subprocess.run([str(c) for c in cmd], **kwargs)
    if done.returncode != 0:
        sys.exit(f"moe_bench.py: {' '.join(str(c) for c in cmd)}\n  failed with exit code {done.returncode} (its message is above)")


def routing(t, skewed, seed=7):
    """Expert indices [t, 2] (distinct per token) and normalized weights [t, 2]."""
    g = torch.Generator().manual_seed(seed + t + (1000 if skewed else 0))
    scores = torch.rand(t, E, generator=g)
    if skewed:  # half the tokens pick expert 0 first
        scores[0::2, 0] = 2.0
    top = scores.topk(K, dim=1)
    weights = top.values / top.values.sum(dim=1, keepdim=True)
    return top.indices.to(torch.int32), weights.float()


def time_cuda(fn, iters=100, warmup=10):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    stop = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        start[i].record()
        fn()
        stop[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1000 for s, e in zip(start, stop))
    return times[len(times) // 2]


def layer_flops(t):
    return 2 * t * K * (H * 2 * FFN + FFN * H)


def floor_us(t, kind):
    weight_bytes = E * 3 * H * FFN * (1 if kind == "fp8" else 2)
    return max(weight_bytes / BANDWIDTH, layer_flops(t) / PEAK[kind]) * 1e6


# ---- the PyTorch peers ----
def rmsnorm(x, g):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * g.float()).to(x.dtype)


def swiglu(h):
    return F.silu(h[:, :FFN]) * h[:, FFN:]


def quantize(t):
    amax = t.abs().amax().float().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    return (t.float() * scale).to(torch.float8_e4m3fn), scale.reciprocal()


class Weights:
    def __init__(self):
        g = torch.Generator(device="cuda").manual_seed(1234)
        self.gamma = (1 + 0.1 * torch.randn(H, device="cuda", generator=g)).bfloat16()
        self.w1 = (torch.randn(E, 2 * FFN, H, device="cuda", generator=g) / math.sqrt(H)).bfloat16()
        self.w2 = (torch.randn(E, H, FFN, device="cuda", generator=g) / math.sqrt(FFN)).bfloat16()
        q1 = [quantize(self.w1[e]) for e in range(E)]
        q2 = [quantize(self.w2[e]) for e in range(E)]
        self.w1_fp8, self.w1_s = [q[0] for q in q1], [q[1] for q in q1]
        self.w2_fp8, self.w2_s = [q[0] for q in q2], [q[1] for q in q2]


def sorted_slots(idx):
    flat = idx.flatten().long()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=E).tolist()  # the host synchronisation TE's m_splits also needs
    return order, order // K, counts


def loop_layer(x, idx, wts, w, expert):
    xn = rmsnorm(x, w.gamma)
    order, tokens, counts = sorted_slots(idx)
    xs = xn[tokens]
    outs, start = [], 0
    for e, c in enumerate(counts):
        if c:
            outs.append(expert(xs[start:start + c], e))
        start += c
    ys = torch.cat(outs).float() * wts.flatten()[order, None]
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device).index_add_(0, tokens, ys)
    return x + out.to(x.dtype)


def expert_bf16(w):
    return lambda xe, e: swiglu(xe @ w.w1[e].t()) @ w.w2[e].t()


def expert_fp8(w):
    def run(xe, e):
        rows = xe.shape[0]
        padded = (rows + 15) // 16 * 16
        if padded != rows:
            xe = F.pad(xe, (0, 0, 0, padded - rows))
        xq, xs = quantize(xe)
        h = torch._scaled_mm(xq, w.w1_fp8[e].t(), scale_a=xs, scale_b=w.w1_s[e], out_dtype=torch.bfloat16, use_fast_accum=True)
        aq, a_s = quantize(swiglu(h))
        y = torch._scaled_mm(aq, w.w2_fp8[e].t(), scale_a=a_s, scale_b=w.w2_s[e], out_dtype=torch.bfloat16, use_fast_accum=True)
        return y[:rows]
    return run


def padded_layer(x, idx, wts, w, capacity):
    """Capacity-factor dispatch with static shapes: no host synchronisation, CUDA-graph safe."""
    xn = rmsnorm(x, w.gamma)
    flat = idx.flatten().long()
    onehot = F.one_hot(flat, E)
    position = (onehot.cumsum(0) * onehot).sum(1) - 1  # the slot's place in its expert, in slot order
    keep = position < capacity
    # Dropped slots go to a spare row past the experts' (no boolean indexing: it synchronises).
    where = torch.where(keep, flat * capacity + position, E * capacity)
    buffer = torch.zeros(E * capacity + 1, H, dtype=x.dtype, device=x.device)
    tokens = torch.arange(flat.numel(), device=x.device) // K
    buffer.index_copy_(0, where, xn[tokens])
    h = torch.bmm(buffer[:E * capacity].view(E, capacity, H), w.w1.transpose(1, 2))
    a = F.silu(h[..., :FFN]) * h[..., FFN:]
    y = torch.bmm(a, w.w2.transpose(1, 2)).reshape(E * capacity, H)
    ys = y[where.clamp(max=E * capacity - 1)].float() * (wts.flatten() * keep)[:, None]
    return x + ys.view(-1, K, H).sum(1).to(x.dtype)


def reference32(x, idx, wts, w):
    xn = rmsnorm(x, w.gamma).float()
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for j in range(K):
        for e in range(E):
            rows = (idx[:, j] == e).nonzero().flatten()
            if rows.numel():
                h = xn[rows] @ w.w1[e].float().t()
                out[rows] += wts[rows, j, None] * ((F.silu(h[:, :FFN]) * h[:, FFN:]) @ w.w2[e].float().t())
    return out


def rel(y, x, ref):
    branch = (y.float() - x.float())
    return ((branch - ref).norm() / ref.norm()).item()


def hand_graph(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = fn()
    return graph, static_y


def run_peers(out, tokens, names):
    w = Weights()
    compiled_expert = torch.compile(expert_bf16(w), dynamic=True)
    results = []
    for t in tokens:
        x = torch.randn(t, H, device="cuda").bfloat16()
        capacity = (math.ceil(1.25 * t * K / E) + 15) // 16 * 16
        for skewed in (False, True):
            idx, wts = routing(t, skewed)
            idx, wts = idx.cuda(), wts.cuda()
            ref = reference32(x, idx, wts, w)
            peers = {
                "loop bf16": (lambda: loop_layer(x, idx, wts, w, expert_bf16(w)), "bf16"),
                "loop fp8": (lambda: loop_layer(x, idx, wts, w, expert_fp8(w)), "fp8"),
                "compile bf16": (lambda: loop_layer(x, idx, wts, w, compiled_expert), "bf16"),
                "padded bf16": (lambda: padded_layer(x, idx, wts, w, capacity), "bf16"),
            }
            for name in names:
                if name == "padded bf16 +graph":
                    graph, static_y = hand_graph(lambda: padded_layer(x, idx, wts, w, capacity))
                    fn, kind = (lambda: graph.replay() or static_y), "bf16"
                else:
                    fn, kind = peers[name]
                y = fn()
                torch.cuda.synchronize()
                error = rel(y, x, ref)
                us = time_cuda(fn)
                row = {"contender": name, "T": t, "routing": "skewed" if skewed else "uniform", "us": us, "error": error,
                       "bound": BOUND[kind], "ok": error <= BOUND[kind], "peak_bytes": torch.cuda.max_memory_allocated()}
                print(json.dumps(row), flush=True)
                results.append(row)
                (out / "moe-peers.json").write_text(json.dumps(results, indent=1))


def run_train_peers(out, tokens, routings):
    """The PyTorch training steps: forward, then backward from a random dy."""
    w = Weights()
    for v in (w.gamma, w.w1, w.w2):
        v.requires_grad_()
    # The loop's experts each own their weights (TE's GroupedLinear: one parameter per GEMM).
    w1s = [w.w1[e].detach().clone().requires_grad_() for e in range(E)]
    w2s = [w.w2[e].detach().clone().requires_grad_() for e in range(E)]
    expert = lambda xe, e: swiglu(xe @ w1s[e].t()) @ w2s[e].t()
    compiled_expert = torch.compile(expert, dynamic=True)
    results = []
    for t in tokens:
        x = torch.randn(t, H, device="cuda").bfloat16().requires_grad_()
        dy = torch.randn(t, H, device="cuda").bfloat16()
        capacity = (math.ceil(1.25 * t * K / E) + 15) // 16 * 16
        for skewed in [r == "skewed" for r in routings]:
            idx, wts = routing(t, skewed)
            idx, wts = idx.cuda(), wts.cuda().requires_grad_()
            peers = {
                "loop bf16": lambda: loop_layer(x, idx, wts, w, expert).backward(dy),
                "compile bf16": lambda: loop_layer(x, idx, wts, w, compiled_expert).backward(dy),
                "padded bf16": lambda: padded_layer(x, idx, wts, w, capacity).backward(dy),
            }
            for name, fn in peers.items():
                us = time_cuda(fn, iters=20, warmup=5)
                row = {"contender": name + " train", "T": t, "routing": "skewed" if skewed else "uniform", "us": us,
                       "peak_bytes": torch.cuda.max_memory_allocated()}
                print(json.dumps(row), flush=True)
                results.append(row)
                (out / "moe-train-peers.json").write_text(json.dumps(results, indent=1))


def run_tec_train(out, tokens, build, recipes, routings):
    import numpy as np
    write_graphs(out, tokens)
    results = []
    # The plans compile side by side (each about a minute: 5.6 GB of fp32 masters to write).
    plans = {recipe: out / f"moe.{recipe}.train.teplan" for recipe in recipes}
    compiles = {recipe: subprocess.Popen([str(build / "te-compile"), str(out / "moe_routed.json"), "-o", str(plan), "--recipe", recipe,
                                          "--mode", "train", "-q"]) for recipe, plan in plans.items()}
    for recipe, process in compiles.items():
        if process.wait() != 0:
            sys.exit(f"moe_bench.py: te-compile of the {recipe} train plan failed with exit code {process.returncode} (its message is above)")
    for recipe in recipes:
        plan = plans[recipe]
        for t in tokens:
            for label, skewed in [(r, r == "skewed") for r in routings]:
                idx, wts = routing(t, skewed)
                np.save(out / "experts.npy", idx.numpy())
                np.save(out / "weights.npy", wts.numpy())
                report = out / f"{plan.stem}.{t}.json"
                # --profile adds 20 eager steps with events between the steps (the graph's replays are
                # timed apart, before them): where the step's time goes, from the same run.
                run_tool([build / "te-run", plan, "--shape", f"T={t}", "--iterations", "20", "--warmup", "5", "--json", report,
                          "--input", f"experts={out}/experts.npy", "--input", f"weights={out}/weights.npy", "--profile"],
                         stdout=subprocess.DEVNULL)
                r = json.loads(report.read_text())
                row = {"contender": f"tec {recipe} train", "T": t, "routing": label, "us": r["graph"]["p50_us"],
                       "peak_bytes": r["arena_bytes"] + r["constant_bytes"], "phases_us": r.get("phases_us", {}),
                       "largest_steps": sorted(([s["step"], s["p50_us"]] for s in r.get("steps", [])), key=lambda s: -s[1])[:4]}
                print(json.dumps(row), flush=True)
                results.append(row)
                (out / "moe-tec-train.json").write_text(json.dumps(results, indent=1))
        plan.unlink()


def write_graphs(out, tokens):
    """out/moe_routed.json: examples/moe.json with the routing as inputs; out/moe_router.json: with its router, these T."""
    graph = json.loads((ROOT / "examples" / "moe.json").read_text())
    graph["dims"]["T"] = tokens
    (out / "moe_router.json").write_text(json.dumps(graph, indent=1))
    graph["name"] = "moe_routed"
    graph["inputs"] += [{"name": "experts", "shape": ["T", K], "dtype": "int32"}, {"name": "weights", "shape": ["T", K], "dtype": "fp32"}]
    graph["ops"] = [op for op in graph["ops"] if op["op"] != "moe_router"]
    for op in graph["ops"]:
        op["inputs"] = ["experts" if i == "router.indices" else "weights" if i == "router" else i for i in op["inputs"]]
    (out / "moe_routed.json").write_text(json.dumps(graph, indent=1))


def run_tec(out, tokens, build, recipes, router):
    import numpy as np
    write_graphs(out, tokens)
    results = []
    name = "moe-tec-router.json" if router else "moe-tec.json"
    for recipe in recipes:
        plan = out / f"moe.{recipe}.{'router' if router else 'routed'}.teplan"
        started = time.time()
        # "fp8-block+bf16-copy": te-compile --no-grouped-block-scales (the experts through a bf16 copy).
        base, _, variant = recipe.partition("+")
        flags = ["--no-grouped-block-scales"] if variant == "bf16-copy" else []
        run_tool([build / "te-compile", out / ("moe_router.json" if router else "moe_routed.json"), "-o", plan, "--recipe", base, "-q", *flags])
        compile_s = time.time() - started
        for t in tokens:
            cases = [("new routing", ["--rotate", "4", "--rotate-seeds"]), ("fixed routing", ["--rotate", "4"])] if router else [
                ("uniform", False), ("skewed", True)]
            for label, arg in cases:
                extra = []
                if router:
                    extra = arg
                else:
                    idx, wts = routing(t, arg)
                    np.save(out / "experts.npy", idx.numpy())
                    np.save(out / "weights.npy", wts.numpy())
                    extra = ["--input", f"experts={out}/experts.npy", "--input", f"weights={out}/weights.npy", "--profile"]
                report = out / f"{plan.stem}.{t}.json"
                run_tool([build / "te-run", plan, "--shape", f"T={t}", "--iterations", "100", "--warmup", "10", "--json", report] + extra,
                         stdout=subprocess.DEVNULL)
                r = json.loads(report.read_text())
                row = {"contender": f"tec {recipe}" + (" (router)" if router else ""), "T": t, "routing": label,
                       "us": r["graph"]["p50_us"], "peak_bytes": r["arena_bytes"] + r["constant_bytes"], "compile_s": compile_s}
                if "steps" in r:
                    row["gemm_us"] = sum(s["p50_us"] for s in r["steps"] if s["step"].split("+")[0] in ("fc1", "fc2"))
                print(json.dumps(row), flush=True)
                results.append(row)
                (out / name).write_text(json.dumps(results, indent=1))
        plan.unlink()


def run_dense(out, tokens):
    """One dense GEMM pair of the grouped GEMMs' FLOPs, bf16 and FP8."""
    results = []
    for t in tokens:
        m = t * K
        a = torch.randn(m, H, device="cuda").bfloat16()
        b = torch.randn(m, FFN, device="cuda").bfloat16()
        w1 = torch.randn(2 * FFN, H, device="cuda").bfloat16()
        w2 = torch.randn(H, FFN, device="cuda").bfloat16()
        us = time_cuda(lambda: (a @ w1.t(), b @ w2.t()))
        results.append({"T": t, "kind": "bf16", "us": us})
        aq, bq, w1q, w2q = (v.to(torch.float8_e4m3fn) for v in (a, b, w1, w2))
        one = torch.ones((), device="cuda")
        us = time_cuda(lambda: (torch._scaled_mm(aq, w1q.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True),
                                torch._scaled_mm(bq, w2q.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True)))
        results.append({"T": t, "kind": "fp8", "us": us})
        print(json.dumps(results[-2:]), flush=True)
    (out / "moe-dense.json").write_text(json.dumps(results, indent=1))


RESULT_FILES = ("moe-tec.json", "moe-peers.json", "moe-dense.json", "moe-tec-train.json", "moe-train-peers.json", "moe-tec-router.json")


def report(out):
    if not any((out / name).exists() for name in RESULT_FILES):
        sys.exit(f"moe_bench.py: no results in {out} (none of {', '.join(RESULT_FILES)}); run a --part first")
    rows = []
    for name in ("moe-tec.json", "moe-peers.json"):
        if (out / name).exists():
            rows += json.loads((out / name).read_text())
    tokens = sorted({r["T"] for r in rows})
    lines = ["MoE layer forward, given routing (median us; x best correct peer; x floor)"] if rows else []
    for routing_kind in ("uniform", "skewed"):
        if not any(r["routing"] == routing_kind for r in rows):
            continue
        lines.append(f"\nrouting: {routing_kind}")
        lines.append(f"{'contender':<20}" + "".join(f"{'T=' + str(t):>34}" for t in tokens))
        sel = [r for r in rows if r["routing"] == routing_kind]
        best = {t: min((r for r in sel if r["T"] == t and not r["contender"].startswith("tec") and r.get("ok")), key=lambda r: r["us"],
                       default=None) for t in tokens}
        for c in sorted({r["contender"] for r in sel}, key=lambda c: (not c.startswith("tec"), c)):
            line = f"{c:<20}"
            for t in tokens:
                r = next((r for r in sel if r["contender"] == c and r["T"] == t), None)
                if r is None:
                    line += f"{'-':>34}"
                    continue
                kind = "fp8" if "fp8" in c else "bf16"
                cell = f"{r['us']:.0f}"
                if best[t]:
                    cell += f" ({r['us'] / best[t]['us']:.2f}x)"
                cell += f" fl {r['us'] / floor_us(t, kind):.1f}x"
                if "error" in r and not r["ok"]:
                    cell += f" err {r['error']:.2f}!"
                line += f"{cell:>34}"
            lines.append(line)
    if (out / "moe-dense.json").exists():
        dense = json.loads((out / "moe-dense.json").read_text())
        lines.append("\ngrouped GEMMs (tec fc1 + fc2, eager step times, uniform; fc1's step holds the SwiGLU in its epilogue and, "
                     "under FP8, the cast pass of its output) against one dense GEMM pair of the same FLOPs")
        for r in [r for r in rows if r["contender"].startswith("tec") and r["routing"] == "uniform" and "gemm_us" in r]:
            kind = "fp8" if "fp8" in r["contender"] else "bf16"
            d = next((d for d in dense if d["T"] == r["T"] and d["kind"] == kind), None)
            if d:
                lines.append(f"  {r['contender']:<18} T={r['T']:<6} {r['gemm_us']:9.0f} us vs {d['us']:9.0f} us dense: {r['gemm_us'] / d['us']:.2f}x")
    train = []
    for name in ("moe-tec-train.json", "moe-train-peers.json"):
        if (out / name).exists():
            train += json.loads((out / name).read_text())
    if train:
        lines.append("\ntraining step (forward + backward, wgrad accumulated; median us; x best peer; x the GEMMs' FLOP floor: 3x the forward's)")
        for routing_kind in ("uniform", "skewed"):
            sel = [r for r in train if r["routing"] == routing_kind]
            if not sel:
                continue
            lines.append(f"routing: {routing_kind}")
            for c in sorted({r["contender"] for r in sel}, key=lambda c: (not c.startswith("tec"), c)):
                line = f"  {c:<22}"
                for t in sorted({r["T"] for r in train}):
                    r = next((r for r in sel if r["contender"] == c and r["T"] == t), None)
                    best = min((p["us"] for p in sel if p["T"] == t and not p["contender"].startswith("tec")), default=None)
                    if r is None:
                        line += f"{'-':>30}"
                        continue
                    kind = "fp8" if "fp8" in c else "bf16"
                    cell = f"T={t} {r['us']:.0f}" + (f" ({r['us'] / best:.2f}x)" if best else "") + \
                        f" fl {r['us'] / (3 * layer_flops(t) / PEAK[kind] * 1e6):.1f}x"
                    line += f"{cell:>30}"
                lines.append(line)
        profiled = [r for r in train if r.get("phases_us")]
        if profiled:
            lines.append("where a tec step's time goes (te-run --profile: eager step medians, us)")
            for r in sorted(profiled, key=lambda r: (r["contender"], r["routing"], r["T"])):
                phases = ", ".join(f"{phase} {us:.0f}" for phase, us in sorted(r["phases_us"].items()))
                largest = ", ".join(f"{step} {us:.0f}" for step, us in r.get("largest_steps", []))
                lines.append(f"  {r['contender']:<22} T={r['T']:<5} {r['routing']:<8} {phases}; largest: {largest}")
    if (out / "moe-tec-router.json").exists():
        lines.append("\nwith the router, new routing every run (4 sessions of different tokens in turn) against fixed routing")
        routed = json.loads((out / "moe-tec-router.json").read_text())
        for r in [r for r in routed if r["routing"] == "new routing"]:
            f = next((f for f in routed if f["contender"] == r["contender"] and f["T"] == r["T"] and f["routing"] == "fixed routing"), None)
            if f:
                lines.append(f"  {r['contender']:<22} T={r['T']:<6} new {r['us']:9.0f} us, fixed {f['us']:9.0f} us: {r['us'] / f['us']:.3f}x")
    text = "\n".join(lines)
    print(text)
    (out / "moe-table.txt").write_text(text + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--build", type=Path, default=ROOT / "build-gpu" / "cli", help="folder holding te-compile and te-run")
    ap.add_argument("--tokens", default="256,2048,8192")
    ap.add_argument("--part", default="tec,router,peers,dense", help="comma-separated: tec, router, peers, dense, train, train-peers")
    ap.add_argument("--recipes", default="bf16,fp8-current",
                    help="comma-separated tec recipes; fp8-block+bf16-copy compiles with --no-grouped-block-scales")
    ap.add_argument("--peers", default="loop bf16,loop fp8,compile bf16,padded bf16,padded bf16 +graph")
    ap.add_argument("--routings", default="uniform,skewed", help="training parts: comma-separated, of uniform and skewed")
    ap.add_argument("--report", action="store_true", help="print the table from --out's JSON and exit")
    a = ap.parse_args()
    if a.report:
        return report(a.out)
    # Usage errors first, so that they show on any machine.
    try:
        tokens = [int(t) for t in a.tokens.split(",")]
    except ValueError:
        ap.error(f"--tokens {a.tokens}: comma-separated token counts, e.g. 256,2048,8192")
    parts = a.part.split(",")
    known = ("tec", "router", "peers", "dense", "train", "train-peers")
    if unknown := [p for p in parts if p not in known]:
        ap.error(f"--part {','.join(unknown)}: not one of {', '.join(known)}")
    recipes = a.recipes.split(",")
    routings = a.routings.split(",")
    if any(r not in ("uniform", "skewed") for r in routings):
        ap.error(f"--routings {a.routings}: takes uniform and skewed")
    if torch is None or not torch.cuda.is_available():
        sys.exit("moe_bench.py: the benchmark needs PyTorch with a CUDA device (run it on the GPU machine); --report works without")
    a.out.mkdir(parents=True, exist_ok=True)
    if "tec" in parts:
        run_tec(a.out, tokens, a.build, recipes, router=False)
    if "router" in parts:
        run_tec(a.out, tokens, a.build, recipes, router=True)
    if "dense" in parts:
        run_dense(a.out, tokens)
    if "peers" in parts:
        run_peers(a.out, tokens, a.peers.split(","))
    if "train" in parts:
        run_tec_train(a.out, tokens, a.build, [r for r in recipes if "+" not in r], routings)
    if "train-peers" in parts:
        run_train_peers(a.out, tokens, routings)
    report(a.out)


if __name__ == "__main__":
    main()
