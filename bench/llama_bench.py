#!/usr/bin/env python3
"""Llama layer benchmark (issue 25): examples/llama_layer.json's pre-norm decoder layer, forward.

hidden 4096, 32 query heads and 8 kv heads of 128 (GQA), ffn 14336 (SwiGLU), causal, rope theta
500000, bf16 activations; batch B x sequence T tokens. Contenders:
  tec                  te-compile of examples/llama_layer.json (generated weights) under bf16,
                       fp8-current and fp8-delayed; te-run replays the plan's CUDA graph. Attention
                       runs in cuDNN's SDPA (bf16 under every recipe), rope in tec's row kernel.
  torch eager          the same layer by hand in PyTorch bf16: F.linear, Hugging Face's rotate_half
                       rope, F.scaled_dot_product_attention (is_causal, enable_gqa; the flash or
                       cuDNN backend PyTorch picks), F.rms_norm, F.silu.
  torch graph          that eager layer captured by hand in one torch.cuda.CUDAGraph.
  torch.compile        that layer through torch.compile (mode max-autotune-no-cudagraphs, then
                       captured in a CUDA graph by hand, as the graph row).
  tec attention alone  a plan of the layer's attention alone (bf16 q, k, v in), replayed as a CUDA
                       graph like the layer (--profile's eager step times add cuDNN's host-side
                       work per call).
  sdpa alone           F.scaled_dot_product_attention of the layer's shapes alone (cuDNN backend) on
                       q, k, v in tec's bshd layout, against which tec's attention step (te-run
                       --profile, eager) is compared.
Each timing is the median of 100 runs after 10 warm-up runs, timed with CUDA events. Floor: the
layer's FLOPs / peak (800 TFLOP/s bf16, 1600 FP8 dense on the H100).

  bench/llama_bench.py --out DIR [--build .carry/gpu] [--shapes 1x2048,1x8192] [--part tec,torch|attention,sdpa]
  bench/llama_bench.py --out DIR --report
"""
import argparse, json, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
H, NH, NKV, D, FFN, THETA = 4096, 32, 8, 128, 14336, 500000.0


def flops(b, t):
    tokens = b * t
    linear = 2 * tokens * H * (H + 2 * NKV * D + H + 2 * FFN + FFN)
    attention = 2 * 2 * b * NH * t * t * D / 2  # causal: half the scores
    return linear + attention


def run_tec(out, build, shapes):
    results = {}
    for shape in shapes:
        b, t = shape
        for recipe in ("bf16", "fp8-current", "fp8-delayed"):
            plan = out / f"llama.{recipe}.{b}x{t}.teplan"
            subprocess.run([build / "cli/te-compile", ROOT / "examples/llama_layer.json", "--recipe", recipe, "--shape", f"B={b}",
                            "--shape", f"T={t}", "-q", "-o", plan], check=True)
            report = out / f"llama.{recipe}.{b}x{t}.json"
            subprocess.run([build / "cli/te-run", plan, "--iterations", "100", "--warmup", "10", "--profile", "--json", report],
                           check=True, stdout=subprocess.DEVNULL)
            r = json.loads(report.read_text())
            attention_us = sum(s["p50_us"] for s in r.get("steps", []) if s["step"].startswith("attn"))
            results[f"tec {recipe} {b}x{t}"] = {"us": r["graph"]["p50_us"], "attention_us": attention_us, "device": r["device"]}
            print(f"  tec {recipe} {b}x{t}: {r['graph']['p50_us']:.1f} us (graph), attention step {attention_us:.1f} us (eager)", flush=True)
            plan.unlink()
    return results


def run_attention_alone(out, build, shapes):
    """tec's attention step as a plan of its own (bf16 q, k, v in), timed as a CUDA graph replay:
    the eager step times of --profile include cuDNN's host-side work per call, which a replayed
    graph does not do."""
    results = {}
    for b, t in shapes:
        graph = {"name": "attention_alone", "dtype": "bf16", "recipe": "bf16", "dims": {"B": b, "T": t, "Q": NH * D, "KV": NKV * D},
                 "inputs": [{"name": "q", "shape": ["B", "T", "Q"]}, {"name": "k", "shape": ["B", "T", "KV"]}, {"name": "v", "shape": ["B", "T", "KV"]}],
                 "ops": [{"name": "o", "op": "attention", "inputs": ["q", "k", "v"], "attrs": {"heads": NH, "kv_heads": NKV, "head_dim": D, "causal": True}}],
                 "outputs": ["o"]}
        model, plan, report = out / f"attention.{b}x{t}.json", out / f"attention.{b}x{t}.teplan", out / f"attention.{b}x{t}.report.json"
        model.write_text(json.dumps(graph))
        subprocess.run([build / "cli/te-compile", model, "-q", "-o", plan], check=True)
        subprocess.run([build / "cli/te-run", plan, "--iterations", "100", "--warmup", "10", "--json", report], check=True, stdout=subprocess.DEVNULL)
        r = json.loads(report.read_text())
        results[f"tec attention alone {b}x{t}"] = {"us": r["graph"]["p50_us"], "device": r["device"]}
        print(f"  tec attention alone {b}x{t}: {r['graph']['p50_us']:.1f} us (graph)", flush=True)
        plan.unlink()
    return results


def run_torch(shapes, layers=True):
    import torch
    import torch.nn.functional as F
    from moe_bench import hand_graph  # warm-up on a side stream, then one capture

    torch.manual_seed(0)
    dev = "cuda"
    w = {name: (torch.randn(shape, device=dev) * 0.02).bfloat16()
         for name, shape in {"q": (H, H), "k": (NKV * D, H), "v": (NKV * D, H), "o": (H, H), "gate_up": (2 * FFN, H), "down": (H, FFN)}.items()}
    g1 = torch.ones(H, device=dev, dtype=torch.bfloat16)
    g2 = torch.ones(H, device=dev, dtype=torch.bfloat16)

    def rope_tables(t):
        inv = THETA ** (-torch.arange(0, D, 2, device=dev, dtype=torch.float64) / D)
        angles = torch.outer(torch.arange(t, device=dev, dtype=torch.float64), inv)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().bfloat16(), angles.sin().bfloat16()

    def rotate_half(x):
        return torch.cat([-x[..., D // 2:], x[..., :D // 2]], dim=-1)

    def layer(x, cos, sin):
        b, t, _ = x.shape
        h = F.rms_norm(x, (H,), g1, 1e-5)
        q = F.linear(h, w["q"]).view(b, t, NH, D).transpose(1, 2)
        k = F.linear(h, w["k"]).view(b, t, NKV, D).transpose(1, 2)
        v = F.linear(h, w["v"]).view(b, t, NKV, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, t, H), w["o"])
        gu = F.linear(F.rms_norm(x, (H,), g2, 1e-5), w["gate_up"])
        return x + F.linear(F.silu(gu[..., :FFN]) * gu[..., FFN:], w["down"])

    def timed(fn):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(100):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
        return sorted(times)[len(times) // 2]

    def captured(fn):
        return hand_graph(fn)[0].replay

    compiled = torch.compile(layer, mode="max-autotune-no-cudagraphs")
    results = {}
    for b, t in shapes:
        x = torch.randn(b, t, H, device=dev).bfloat16()
        cos, sin = rope_tables(t)
        with torch.no_grad():
            rows = {"torch eager": lambda: layer(x, cos, sin), "torch graph": captured(lambda: layer(x, cos, sin)),
                    "torch.compile": captured(lambda: compiled(x, cos, sin))} if layers else {}
            # tec's layout: [B, S, heads x D] (bshd), viewed as [B, heads, S, D] with strides.
            q = torch.randn(b, t, NH, D, device=dev).bfloat16().transpose(1, 2)
            kv = torch.randn(b, t, NKV, D, device=dev).bfloat16().transpose(1, 2)
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                sdpa = lambda: F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
                try:
                    rows["sdpa alone (cuDNN)"] = sdpa
                    sdpa()
                except RuntimeError as e:  # no cuDNN backend for GQA in this PyTorch: say so, time flash
                    print(f"  cuDNN SDPA backend unavailable ({str(e).splitlines()[0]}); timing the default backend", flush=True)
                    rows["sdpa alone (default)"] = lambda: F.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
                    del rows["sdpa alone (cuDNN)"]
                for name, fn in rows.items():
                    us = timed(fn)
                    results[f"{name} {b}x{t}"] = {"us": us, "device": torch.cuda.get_device_name()}
                    print(f"  {name} {b}x{t}: {us:.1f} us", flush=True)
    return results


def report(out):
    results = {}
    for part in ("tec", "attention", "torch"):
        path = out / f"llama_{part}.json"
        if path.exists():
            results.update(json.loads(path.read_text()))
    shapes = sorted({k.split()[-1] for k in results}, key=lambda s: tuple(int(v) for v in s.split("x")))
    print("| contender | " + " | ".join(f"B x T = {s}" for s in shapes) + " |")
    print("|---|" + "---|" * len(shapes))
    names = sorted({k.rsplit(" ", 1)[0] for k in results}, key=lambda n: (not n.startswith("tec"), n))
    for name in names:
        cells = []
        for s in shapes:
            r = results.get(f"{name} {s}")
            cells.append("" if not r else f"{r['us']:.0f} us" + (f" (attention {r['attention_us']:.0f})" if r.get("attention_us") else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")
    for s in shapes:
        b, t = (int(v) for v in s.split("x"))
        print(f"floor {s}: {flops(b, t) / 800e12 * 1e6:.0f} us at 800 TFLOP/s (bf16), {flops(b, t) / 1600e12 * 1e6:.0f} us at 1600 (FP8)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--build", type=Path, default=ROOT / "build")
    p.add_argument("--shapes", default="1x2048,1x8192", help="B x T pairs, comma-separated")
    p.add_argument("--part", default="tec,torch", help="tec (the layer, and attention alone), attention (tec's alone), torch (the "
                   "layer and SDPA alone), sdpa (SDPA alone)")
    p.add_argument("--report", action="store_true")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.report:
        shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
        if "tec" in a.part:
            (a.out / "llama_tec.json").write_text(json.dumps(run_tec(a.out, a.build.resolve(), shapes), indent=1))
        if "tec" in a.part or "attention" in a.part:
            (a.out / "llama_attention.json").write_text(json.dumps(run_attention_alone(a.out, a.build.resolve(), shapes), indent=1))
        if "torch" in a.part or "sdpa" in a.part:  # sdpa: PyTorch's attention alone, not the layer
            (a.out / "llama_torch.json").write_text(json.dumps(run_torch(shapes, layers="torch" in a.part), indent=1))
    report(a.out)


if __name__ == "__main__":
    main()
