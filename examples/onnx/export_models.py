#!/usr/bin/env python3
"""Exports the example ONNX models with torch.onnx.export (run where PyTorch is).

    python3 examples/onnx/export_models.py [--out examples/onnx]

gpt_mlp.onnx       y = x + fc2(gelu_tanh(fc1(layernorm(x))))          GPT-style MLP block
llama_mlp.onnx     y = x + down(silu(gate(rmsnorm(x))) * up(rmsnorm(x))) LLaMA-style SwiGLU block
                   (opset 23: RMSNormalization)
and two variants whose norms and GELU the exporter decomposes into elementary ops, for
te-compile's pattern recognition:
gpt_mlp_opset13_torchscript.onnx   the TorchScript exporter at opset 13 (LayerNorm as
                                   ReduceMean/Sub/Pow/Sqrt/Div, GELU tanh as Mul/Add/Tanh)
llama_mlp_opset18.onnx             the dynamo exporter at opset 18 (RMSNorm as
                                   Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul)

Small dims (hidden 128) keep each file under ~1 MB. Weights are fp32 (torch's default) and
seeded, so a re-export gives the same values. The token dims are fixed (batch 2, seq 16):
te-compile then needs no --shape; export with dynamic_shapes to get named dims that
te-compile's --shape/--profiles set.
"""
import argparse
import os

import torch
from torch import nn

HIDDEN, FFN_GPT, FFN_LLAMA = 128, 512, 384
BATCH, SEQ = 2, 16


class GptMlp(nn.Module):
    def __init__(self, hidden=HIDDEN, ffn=FFN_GPT):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=1e-5)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x):
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x)), approximate="tanh"))


class LlamaMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-6)
        self.gate = nn.Linear(HIDDEN, FFN_LLAMA, bias=False)
        self.up = nn.Linear(HIDDEN, FFN_LLAMA, bias=False)
        self.down = nn.Linear(FFN_LLAMA, HIDDEN, bias=False)

    def forward(self, x):
        h = self.norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


def export(model, path, opset, dynamo=True):
    torch.manual_seed(0)
    with torch.no_grad():  # non-trivial norm weights, so a wrong gamma cannot pass
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.02 * torch.randn_like(p))
    x = torch.randn(BATCH, SEQ, HIDDEN)
    torch.onnx.export(model.eval(), (x,), path, input_names=["x"], output_names=["y"], opset_version=opset,
                      dynamo=dynamo, **({"external_data": False} if dynamo else {}))
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    torch.manual_seed(0)
    export(GptMlp(), os.path.join(args.out, "gpt_mlp.onnx"), 18)
    export(GptMlp(), os.path.join(args.out, "gpt_mlp_opset13_torchscript.onnx"), 13, dynamo=False)
    torch.manual_seed(1)
    export(LlamaMlp(), os.path.join(args.out, "llama_mlp.onnx"), 23)
    torch.manual_seed(1)
    export(LlamaMlp(), os.path.join(args.out, "llama_mlp_opset18.onnx"), 18)


if __name__ == "__main__":
    main()
