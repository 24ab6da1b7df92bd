#!/usr/bin/env python3
"""Exports the ONNX corpus that te-compile's pattern recognition is tested on: real models from
torch.onnx.export, both exporters (TorchScript "legacy" and dynamo), several opsets and dtypes.
Run where PyTorch is (the GPU machine's image has it); the models land in --out with a
manifest.json saying how each was made. tests/onnx/corpus/ holds the committed copy.

    python3 tests/onnx/export_corpus.py --out tests/onnx/corpus

Models (hidden 128, ffn 128, seeded weights, non-trivial norm gammas and biases):
  gpt_mlp        x + fc2(gelu_tanh(fc1(layernorm(x)))), Linear biases; fp32, fp16, bf16
  llama_mlp_hf   x + down(silu(gate(h)) * up(h)), h = RMSNorm as Hugging Face writes it
                 (.to(float32), pow(2).mean(-1), rsqrt, .to(input_dtype), weight * h), no
                 biases; 2-D input (the legacy exporter writes Gemm with transB) and 3-D
  llama_mlp_swap the same with the operands the other way round: up(h) * (sigmoid(g) * g)
  ln_gelu_erf    erf-GELU(fc(layernorm(x))) on [batch, seq, hidden] with named dims
A model an exporter cannot write is listed in manifest.json with the error, not silently
dropped.
"""
import argparse
import json
import os
import sys
import traceback

import torch
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "onnx"))
from export_models import GptMlp  # noqa: E402  (the examples' GPT MLP, at the corpus's dims)

HIDDEN, FFN = 128, 128
TOKENS, BATCH, SEQ = 32, 2, 16


class HfRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm, verbatim in its arithmetic."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaMlpHf(nn.Module):
    """transformers' LlamaMLP behind its RMSNorm, with the residual."""

    def __init__(self, swapped=False):
        super().__init__()
        self.norm = HfRMSNorm(HIDDEN)
        self.gate_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)
        self.act_fn = nn.SiLU()
        self.swapped = swapped

    def forward(self, x):
        h = self.norm(x)
        if self.swapped:
            g = self.gate_proj(h)
            return x + self.down_proj(self.up_proj(h) * (torch.sigmoid(g) * g))
        return x + self.down_proj(self.act_fn(self.gate_proj(h)) * self.up_proj(h))


class LnGeluErf(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(HIDDEN)
        self.fc = nn.Linear(HIDDEN, FFN)

    def forward(self, x):
        return nn.functional.gelu(self.fc(self.ln(x)))


def seeded(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():  # non-trivial gammas and biases, so that a dropped one cannot pass
        for name, p in model.named_parameters():
            if p.dim() == 1 and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn_like(p))
    return model.eval()


DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def export(out, manifest, name, model, dtype, exporter, opset, shape, named_dims=False):
    file = f"{name}.{dtype}.{exporter}{opset}.{'2d' if len(shape) == 2 else '3d'}.onnx"
    path = os.path.join(out, file)
    entry = {"file": file, "model": name, "dtype": dtype, "exporter": exporter, "opset": opset, "input_shape": shape}
    model = model.to(DTYPES[dtype])
    x = torch.randn(*shape).to(DTYPES[dtype])
    try:
        if exporter == "legacy":
            kw = {"dynamic_axes": {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}} if named_dims else {}
            torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], opset_version=opset, dynamo=False, **kw)
        else:
            kw = {}
            if named_dims:
                kw["dynamic_shapes"] = {"x": {0: torch.export.Dim("batch", max=4096), 1: torch.export.Dim("seq", max=8192)}}
            torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], opset_version=opset, dynamo=True,
                              external_data=False, **kw)
        entry["bytes"] = os.path.getsize(path)
        if named_dims:
            entry["shape_args"] = ["--shape", f"batch={shape[0]}", "--shape", f"seq={shape[1]}"]
        print(f"wrote {file} ({entry['bytes']} bytes)", flush=True)
    except Exception as e:  # an exporter's refusal is a finding, kept in the manifest
        entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:400]
        print(f"FAILED {file}: {entry['error']}", flush=True)
        traceback.print_exc(limit=1)
        if os.path.exists(path):
            os.remove(path)
    manifest.append(entry)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    manifest = []
    two_d, three_d = [TOKENS, HIDDEN], [BATCH, SEQ, HIDDEN]
    for dtype in ("fp32", "fp16", "bf16"):
        for exporter, opset in (("legacy", 17), ("dynamo", 18)):
            export(args.out, manifest, "gpt_mlp", seeded(GptMlp(HIDDEN, FFN), 1), dtype, exporter, opset, three_d)
    export(args.out, manifest, "gpt_mlp", seeded(GptMlp(HIDDEN, FFN), 1), "fp32", "legacy", 14, two_d)
    export(args.out, manifest, "gpt_mlp", seeded(GptMlp(HIDDEN, FFN), 1), "fp32", "dynamo", 23, three_d)
    for dtype in ("fp32", "fp16", "bf16"):
        for exporter, opset in (("legacy", 17), ("dynamo", 18)):
            for shape in (two_d, three_d):
                export(args.out, manifest, "llama_mlp_hf", seeded(LlamaMlpHf(), 2), dtype, exporter, opset, shape)
    export(args.out, manifest, "llama_mlp_hf", seeded(LlamaMlpHf(), 2), "fp32", "legacy", 14, two_d)
    export(args.out, manifest, "llama_mlp_hf", seeded(LlamaMlpHf(), 2), "fp32", "dynamo", 23, three_d)
    for exporter, opset in (("legacy", 17), ("dynamo", 18)):
        export(args.out, manifest, "llama_mlp_swap", seeded(LlamaMlpHf(swapped=True), 3), "fp32", exporter, opset, two_d)
        export(args.out, manifest, "ln_gelu_erf", seeded(LnGeluErf(), 4), "fp32", exporter, opset, three_d, named_dims=True)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump({"torch": torch.__version__, "models": manifest}, f, indent=1)
    print(f"{sum('error' not in m for m in manifest)} of {len(manifest)} exports written")


if __name__ == "__main__":
    main()
