#!/usr/bin/env python3
"""A Hugging Face-style Llama decoder layer, exported by torch.onnx on the GPU machine, compiled
by te-compile, run on the GPU by te-run, and checked against onnxruntime (issue 25).

The layer is modeling_llama's eager path written out in PyTorch (transformers is not on the GPU
machine): LlamaRMSNorm (in fp32, then the weight), q/k/v/o projections without bias, the rotary
embedding computed in forward from position ids 0..S-1 (the exporter folds the tables into
constants), apply_rotary_pos_emb with rotate_half, eager attention (matmul, x scaling, + the
causal mask, softmax in fp32, matmul), and the SwiGLU MLP. Two layers: hf_llama (2 heads of 64,
MHA) and hf_llama_gqa (4 query heads and 2 kv heads of 32, whose keys and values go through
Hugging Face's repeat_kv: Unsqueeze, Expand, Reshape).

tec compiles the bf16 export (attention then runs in cuDNN's SDPA); onnxruntime runs the fp32
export of the same weights, and the bound is the recipe's (0.02 bf16, 0.08 FP8), as for the other
ONNX models whose reference is the fp32 copy.

  tests/onnx/hf_llama_gpu.py --bin BUILD/cli --out DIR [--recipes bf16,fp8-current]
  tests/onnx/hf_llama_gpu.py --bin BUILD/cli --out DIR --no-export   # DIR's exported models again
Exit: 0 all within bound, 1 a mismatch or a failed step, 77 no GPU or no torch (skipped).
"""
import argparse, copy, subprocess, sys
from pathlib import Path

import numpy as np

HIDDEN, FFN, SEQ, BATCH, THETA = 128, 256, 32, 2, 10000.0
LAYERS = {"hf_llama": (2, 2, 64), "hf_llama_gqa": (4, 2, 32)}  # heads, kv heads, head dim
BOUND = {"bf16": 0.02}


def export(out, prefix, HEADS, KV_HEADS, HEAD_DIM):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from export_corpus import HfRMSNorm  # transformers' LlamaRMSNorm, verbatim in its arithmetic

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def repeat_kv(hidden_states, n_rep):  # modeling_llama's, verbatim
        batch, num_key_value_heads, slen, head_dim = hidden_states.shape
        if n_rep == 1:
            return hidden_states
        hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
        return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)

    class DecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm, self.post_attention_layernorm = HfRMSNorm(HIDDEN, eps=1e-5), HfRMSNorm(HIDDEN, eps=1e-5)
            with torch.no_grad():  # weights that are not all ones, so that a norm's scale is seen
                self.input_layernorm.weight += 0.1 * torch.randn(HIDDEN)
                self.post_attention_layernorm.weight += 0.1 * torch.randn(HIDDEN)
            self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
            self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
            self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
            self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
            self.gate_proj = nn.Linear(HIDDEN, FFN, bias=False)
            self.up_proj = nn.Linear(HIDDEN, FFN, bias=False)
            self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)
            inv_freq = 1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.int64).float() / HEAD_DIM))
            self.register_buffer("inv_freq", inv_freq, persistent=False)
            self.scaling = HEAD_DIM ** -0.5

        def forward(self, x):
            b, s, _ = x.shape
            position_ids = torch.arange(s, device=x.device).unsqueeze(0)
            freqs = (self.inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().to(x.dtype).unsqueeze(1), emb.sin().to(x.dtype).unsqueeze(1)
            residual = x
            h = self.input_layernorm(x)
            q = self.q_proj(h).view(b, s, -1, HEAD_DIM).transpose(1, 2)
            k = self.k_proj(h).view(b, s, -1, HEAD_DIM).transpose(1, 2)
            v = self.v_proj(h).view(b, s, -1, HEAD_DIM).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, HEADS // KV_HEADS), repeat_kv(v, HEADS // KV_HEADS)
            mask = torch.full((s, s), float("-inf"), device=x.device, dtype=x.dtype).triu(1)
            scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling + mask
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
            attn = torch.matmul(probs, v).transpose(1, 2).contiguous().reshape(b, s, -1)
            x = residual + self.o_proj(attn)
            residual = x
            h = self.post_attention_layernorm(x)
            return residual + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    torch.manual_seed(0)
    layer = DecoderLayer().eval()
    x = torch.randn(BATCH, SEQ, HIDDEN)
    np.save(out / f"{prefix}.x.npy", x.numpy())
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        # As from_pretrained(torch_dtype=...) leaves it: the parameters in the model dtype, the
        # rotary frequencies (a buffer made with .float()) in fp32.
        model = copy.deepcopy(layer).to(dtype)
        model.register_buffer("inv_freq", layer.inv_freq.float().clone(), persistent=False)
        path = out / f"{prefix}_{name}.onnx"
        torch.onnx.export(model, (x.to(dtype),), str(path), input_names=["x"], output_names=["y"], opset_version=18, dynamo=False)
        print(f"exported {path.name} ({path.stat().st_size} bytes, torch {torch.__version__})", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, type=Path, help="the folder of te-compile and te-run")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--recipes", default="bf16,fp8-current")
    p.add_argument("--no-export", action="store_true")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.no_export:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("SKIPPED: no torch to export with")
            return 77
        for prefix, shape in LAYERS.items():
            export(a.out, prefix, *shape)
    import onnxruntime as ort
    failed = False
    for prefix in LAYERS:
        x_path = a.out / f"{prefix}.x.npy"
        want = ort.InferenceSession(str(a.out / f"{prefix}_fp32.onnx")).run(None, {"x": np.load(x_path)})[0]
        for recipe in a.recipes.split(","):
            name = f"{prefix}.{recipe}"
            plan = a.out / f"{name}.teplan"
            compiled = subprocess.run([a.bin / "te-compile", a.out / f"{prefix}_bf16.onnx", "--recipe", recipe, "-o", plan, "--report",
                                       a.out / f"{name}.report.json"], capture_output=True, text=True)
            (a.out / f"{name}.compile.log").write_text(compiled.stdout + compiled.stderr)
            if compiled.returncode != 0:
                print(compiled.stdout[-3000:], compiled.stderr[-3000:])
                print(f"FAIL {name}: te-compile exit {compiled.returncode}")
                failed = True
                continue
            ran = subprocess.run([a.bin / "te-run", plan, "--input", f"x={x_path}", "--save-outputs", a.out / name, "--iterations", "10",
                                  "--warmup", "2"], capture_output=True, text=True)
            (a.out / f"{name}.run.log").write_text(ran.stdout + ran.stderr)
            if "no CUDA device" in ran.stdout + ran.stderr:
                print("SKIPPED: no CUDA device")
                return 77
            if ran.returncode != 0:
                print(ran.stdout[-2000:], ran.stderr[-2000:])
                print(f"FAIL {name}: te-run exit {ran.returncode}")
                failed = True
                continue
            got = np.load(a.out / name / "y.npy").astype(np.float64)
            rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
            bound = BOUND.get(recipe, 0.08)
            ok = np.isfinite(rel) and rel <= bound
            failed |= not ok
            gpu_line = next((line for line in ran.stdout.splitlines() if line.startswith("te-run: GPU")), "")
            if prefix.endswith("gqa") and "repeat_kv" not in (a.out / f"{name}.report.json").read_text():
                print(f"FAIL {name}: the report does not say repeat_kv became the attention's kv heads")
                ok, failed = False, True
            print(f"{'PASS' if ok else 'FAIL'} {name}: ||tec_gpu - ort_fp32|| / ||ort_fp32|| = {rel:.3e} (bound {bound}); {gpu_line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
