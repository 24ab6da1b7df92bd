#!/usr/bin/env python3
"""Tensor-parallel MLP benchmark (issue 24): one plan over 2 GPUs against the same layer on one.

y = x + fc2(gelu_tanh(fc1(layernorm(x)))), h=8192, ffn=32768, bf16 activations, global T = 2048
and 8192, Megatron/TE-style tensor parallelism with sequence parallelism: each rank holds T/2
tokens of x and y, all-gathers the norm's output before fc1 (column-parallel), and
reduce-scatters fc2's (row-parallel) partial sums. Contenders:
  tec TP=1 / TP=2      te-compile --tp 1 / --tp 2 of one graph (generated weights), te-run on one
                       GPU / te-run --tp 2 (one rank per GPU, NCCL inside each rank's CUDA graph);
                       bf16 and fp8-current (FP8 all-gather: the group's amax, FP8 codes gathered);
                       TP=2 with the collectives overlapped with fc1's and fc2's row blocks on a
                       second stream (te-compile --tp-overlap on) and without (off; the default, auto,
                       overlaps GEMMs of 4096 rows or more: T=8192 here);
  torch TP=1 / TP=2    PyTorch bf16, the same layer by hand: torch.distributed (NCCL)
                       all_gather_into_tensor / reduce_scatter_tensor around F.linear, eager and
                       captured by hand in one torch.cuda.CUDAGraph per rank.
Each timing is the median over 100 runs after 10 warm-up runs of the slowest rank's CUDA-event
time (a run is as slow as its slowest rank). The speed-up is TP=1 time / TP=2 time, within one
contender. Floor: FLOPs / (ranks x peak), peak 800 (bf16) / 1600 (FP8) TFLOP/s dense per GPU.

  bench/tp_bench.py --out DIR [--build .carry/gpu] [--tokens 2048,8192] [--part tec,torch]
  bench/tp_bench.py --out DIR --report        # the table again, from DIR's JSON
"""
import argparse, json, os, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H, FFN = 8192, 32768
PEAK = {"bf16": 800e12, "fp8-current": 1600e12}


def run_tool(cmd, **kwargs):
    done = subprocess.run([str(c) for c in cmd], **kwargs)
    if done.returncode != 0:
        sys.exit(f"tp_bench.py: {' '.join(str(c) for c in cmd)}\n  failed with exit code {done.returncode} (its message is above)")


def graph(tokens):
    mark = lambda mode: {"tp_mode": mode, "tp_size": 2, "sequence_parallel": True}
    return {
        "name": "tp_bench_mlp", "dims": {"T": tokens, "H": H, "F": FFN}, "dtype": "bf16", "recipe": "bf16",
        "weights": {"init": "random", "seed": 1234},
        "inputs": [{"name": "x", "shape": ["T", "H"]}],
        "ops": [
            {"name": "ln", "op": "layernorm", "inputs": ["x"], "attrs": {"hidden": "H", "eps": 1e-5}},
            {"name": "fc1", "op": "linear", "inputs": ["ln"], "attrs": {"in_features": "H", "out_features": "F", "bias": True, **mark("column")}},
            {"name": "act", "op": "gelu", "inputs": ["fc1"], "attrs": {"approximate": "tanh"}},
            {"name": "fc2", "op": "linear", "inputs": ["act"], "attrs": {"in_features": "F", "out_features": "H", "bias": True, **mark("row")}},
            {"name": "y", "op": "add", "inputs": ["fc2", "x"]}],
        "outputs": ["y"]}


def part_tec(args, out, tokens):
    build = Path(args.build)
    compile_, run = build / "cli" / "te-compile", build / "cli" / "te-run"
    for tool in (compile_, run):
        if not tool.exists():
            sys.exit(f"tp_bench.py: no {tool}: build tec first (--build names the folder with cli/te-compile and cli/te-run)")
    model = out / "tp_bench_mlp.json"
    model.write_text(json.dumps(graph(tokens), indent=1))
    results = json.loads((out / "tec.json").read_text()) if (out / "tec.json").exists() else {}
    # The four plans compile at once (each generates and pre-quantizes 0.5 G weights on the CPU).
    compiling = []
    variants = (("tp1", ["--tp", 1]), ("tp2", ["--tp", 2, "--tp-overlap", "on"]), ("tp2serial", ["--tp", 2, "--tp-overlap", "off"]))
    for recipe in ("bf16", "fp8-current"):
        for variant, flags in variants:
            plan = out / f"{recipe}.{variant}.teplan"
            if not plan.exists():
                print(f"te-compile {recipe} {' '.join(map(str, flags))} ...", flush=True)
                cmd = [compile_, model, *flags, "--recipe", recipe, "--profiles", "T=" + ",".join(map(str, tokens)), "-q",
                       "--cache-dir", out / f"cache.{recipe}.{variant}", "-o", plan]
                compiling.append((cmd, subprocess.Popen([str(c) for c in cmd])))
    for cmd, proc in compiling:
        if proc.wait() != 0:
            sys.exit(f"tp_bench.py: {' '.join(str(c) for c in cmd)}\n  failed with exit code {proc.returncode} (its message is above)")
    for recipe in ("bf16", "fp8-current"):
        for variant, flags in variants:
            tp = flags[1]
            plan = out / f"{recipe}.{variant}.teplan"
            for t in tokens:
                report = out / f"{recipe}.{variant}.T{t}.json"
                cmd = [run, plan, "--shape", f"T={t}", "--iterations", 100, "--warmup", 10, "--json", report]
                if tp > 1:
                    cmd += ["--tp", tp]
                run_tool(cmd, stdout=subprocess.DEVNULL)
                r = json.loads(report.read_text())
                results[f"{recipe} {variant} T{t}"] = {"graph_us": r["graph"]["p50_us"], "eager_us": r["eager"]["p50_us"], "device": r["device"]}
                print(f"  tec {recipe} {variant} T={t}: {r['graph']['p50_us']:.1f} us (graph), {r['eager']['p50_us']:.1f} us (eager)", flush=True)
    (out / "tec.json").write_text(json.dumps(results, indent=1))


def torch_rank(rank, world, tokens, port, queue):
    import torch, torch.distributed as dist
    import torch.nn.functional as F
    from moe_bench import hand_graph  # warm-up on a side stream, then one capture
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    dev, bf = "cuda", torch.bfloat16
    w1 = torch.randn(FFN // world, H, device=dev, dtype=bf, generator=g) * 0.02
    b1 = torch.zeros(FFN // world, device=dev, dtype=bf)
    w2 = torch.randn(H, FFN // world, device=dev, dtype=bf, generator=g) * 0.02
    b2 = torch.zeros(H, device=dev, dtype=bf)
    gamma, beta = torch.ones(H, device=dev, dtype=bf), torch.zeros(H, device=dev, dtype=bf)
    out = {}
    for t in tokens:
        x = torch.randn(t // world, H, device=dev, dtype=bf, generator=g)
        gathered = torch.empty(t, H, device=dev, dtype=bf)
        reduced = torch.empty(t // world, H, device=dev, dtype=bf)

        def step():
            ln = F.layer_norm(x, (H,), gamma, beta, 1e-5)
            if world == 1:
                return x + F.linear(F.gelu(F.linear(ln, w1, b1), approximate="tanh"), w2, b2)
            dist.all_gather_into_tensor(gathered, ln)
            partial = F.linear(F.gelu(F.linear(gathered, w1, b1), approximate="tanh"), w2)
            dist.reduce_scatter_tensor(reduced, partial)
            return x + reduced + b2

        def timed(fn):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for i in range(110):
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                if i >= 10:
                    times.append(start.elapsed_time(stop) * 1000.0)
            if world > 1:
                every = [None] * world
                dist.all_gather_object(every, times)
                times = [max(run) for run in zip(*every)]
            return sorted(times)[len(times) // 2]

        eager = timed(step)
        captured, _ = hand_graph(step)
        graph_us = timed(captured.replay)
        out[f"T{t}"] = {"eager_us": eager, "graph_us": graph_us, "device": torch.cuda.get_device_name(rank)}
        del captured
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def part_torch(args, out, tokens):
    try:
        import torch, torch.multiprocessing as mp
    except ImportError:
        sys.exit("tp_bench.py: the torch part needs PyTorch")
    if torch.cuda.device_count() < 2:
        sys.exit(f"tp_bench.py: the torch part needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    results = {}
    for world in (1, 2):
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        procs = [ctx.Process(target=torch_rank, args=(r, world, tokens, 29500 + world, queue)) for r in range(world)]
        for p in procs:
            p.start()
        got = queue.get(timeout=900)
        for p in procs:
            p.join()
            if p.exitcode != 0:
                sys.exit(f"tp_bench.py: torch rank failed (exit {p.exitcode})")
        for t in tokens:
            results[f"bf16 tp{world} T{t}"] = got[f"T{t}"]
            print(f"  torch bf16 TP={world} T={t}: {got[f'T{t}']['graph_us']:.1f} us (graph), {got[f'T{t}']['eager_us']:.1f} us (eager)", flush=True)
    (out / "torch.json").write_text(json.dumps(results, indent=1))


def report(out, tokens):
    tec = json.loads((out / "tec.json").read_text()) if (out / "tec.json").exists() else {}
    peer = json.loads((out / "torch.json").read_text()) if (out / "torch.json").exists() else {}
    device = next((v["device"] for v in list(tec.values()) + list(peer.values())), "?")
    print(f"\nTP MLP h={H} ffn={FFN}, bf16 activations, sequence parallel; median us of the slowest rank ({device})")
    print(f"{'contender':<28} {'T':>6} {'TP=1 us':>10} {'TP=2 us':>10} {'speed-up':>9} {'TP=2 floor us':>14} {'TP=2/floor':>11}")
    rows = []
    for t in tokens:
        flops = 4.0 * t * H * FFN
        for name, table, recipe, kind, two_key in (
                ("tec bf16, overlap", tec, "bf16", "graph_us", "tp2"), ("tec bf16, no overlap", tec, "bf16", "graph_us", "tp2serial"),
                ("tec fp8-current, overlap", tec, "fp8-current", "graph_us", "tp2"),
                ("tec fp8-current, no overlap", tec, "fp8-current", "graph_us", "tp2serial"),
                ("torch bf16 (eager)", peer, "bf16", "eager_us", "tp2"), ("torch bf16 (graph)", peer, "bf16", "graph_us", "tp2")):
            one, two = table.get(f"{recipe} tp1 T{t}"), table.get(f"{recipe} {two_key} T{t}")
            if not one or not two:
                continue
            floor = flops / (2 * PEAK[recipe]) * 1e6
            speedup = one[kind] / two[kind]
            rows.append({"contender": name, "T": t, "tp1_us": one[kind], "tp2_us": two[kind], "speedup": speedup, "floor_us": floor})
            print(f"{name:<28} {t:>6} {one[kind]:>10.1f} {two[kind]:>10.1f} {speedup:>8.2f}x {floor:>14.1f} {two[kind] / floor:>10.2f}x")
    (out / "table.json").write_text(json.dumps(rows, indent=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--build", default=str(ROOT / "build-gpu"))
    ap.add_argument("--tokens", default="2048,8192")
    ap.add_argument("--part", default="tec,torch")
    ap.add_argument("--report", action="store_true", help="print the table from --out's JSON and exit")
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.report:
        parts = args.part.split(",")
        if "tec" in parts:
            part_tec(args, args.out, tokens)
        if "torch" in parts:
            part_torch(args, args.out, tokens)
    report(args.out, tokens)


if __name__ == "__main__":
    main()
