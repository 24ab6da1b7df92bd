#!/usr/bin/env python3
"""Exports transformers' own modules (not re-implementations) with random weights, the way a
user of tec would: decoder layers of Llama, Qwen2, Gemma, GPT-2 and BERT with both attention
implementations transformers offers (sdpa, eager), and whole causal LMs (input_ids and an
attention_mask -> logits; and given input_ids alone), through both torch.onnx exporters (dynamo and the TorchScript
"legacy" one). A model an exporter refuses is listed in manifest.json with the error, not
silently dropped (issue 50).

    python3 tests/onnx/export_hf.py --out DIR [--only llama,gpt2] [--exporters dynamo]

Needs torch, transformers and onnxscript (pip install torch transformers onnxscript; the
device image has them). Shapes are small so that the exports can be committed: hidden 64, 4
query heads and 2 kv heads of 16 (GQA; Gemma: one kv head, MQA), ffn 128, batch 2, 16 tokens;
causal LMs have 2 layers and a vocabulary of 256. Weights are drawn from a seeded normal
(std 0.05, norm weights around 1) so that no branch is negligible beside the residual.

Each model's file is NAME.ATTN.EXPORTER.onnx; manifest.json records for each the versions
(torch, transformers), the inputs with their shapes, and for a refused export the error.
"""
import argparse
import json
import os
import sys
import traceback

import torch
from torch import nn

import transformers

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM = 64, 128, 4, 2, 16
BATCH, SEQ, VOCAB, LM_LAYERS = 2, 16, 256, 2


def seeded_(module, seed, gain_offset):
    """Random weights: normal(0, 0.05) for matrices and biases; norm gains 1 + normal(0, 0.05)
    (gain_offset 1), or normal alone where the model adds the 1 itself (Gemma's (1 + w))."""
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        noise = torch.randn(p.shape, generator=g) * 0.05
        is_gain = p.dim() == 1 and name.endswith("weight") and any(k in name for k in ("norm", "ln_", "LayerNorm"))
        with torch.no_grad():
            p.copy_(noise + gain_offset if is_gain else noise)
    return module


def configs(attn):
    common = dict(hidden_size=HIDDEN, intermediate_size=FFN, num_attention_heads=HEADS, num_hidden_layers=LM_LAYERS,
                  vocab_size=VOCAB, max_position_embeddings=128)
    out = {
        "llama": transformers.LlamaConfig(num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, **common),
        "qwen2": transformers.Qwen2Config(num_key_value_heads=KV_HEADS, **common),
        "gemma": transformers.GemmaConfig(num_key_value_heads=1, head_dim=HEAD_DIM, **common),
        "gpt2": transformers.GPT2Config(n_embd=HIDDEN, n_inner=FFN, n_head=HEADS, n_layer=LM_LAYERS, vocab_size=VOCAB,
                                        n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
        "bert": transformers.BertConfig(hidden_size=HIDDEN, intermediate_size=FFN, num_attention_heads=HEADS,
                                        num_hidden_layers=1, vocab_size=VOCAB, hidden_dropout_prob=0.0,
                                        attention_probs_dropout_prob=0.0),
    }
    for c in out.values():
        c._attn_implementation = attn
    return out


def additive_causal_mask(x):
    """The mask transformers' create_causal_mask gives eager attention: 0 on and below the
    diagonal, the dtype's lowest above, [B, 1, S, S]."""
    b, s = x.shape[0], x.shape[1]
    m = torch.full((s, s), torch.finfo(x.dtype).min, dtype=x.dtype).triu(1)
    return m[None, None].expand(b, 1, s, s)


class DecoderLayer(nn.Module):
    """A rotary decoder layer (Llama, Qwen2, Gemma) as its model calls it: position ids 0..S-1,
    the model's own rotary embedding, no mask under sdpa (transformers then lets SDPA be
    causal) and the additive causal mask under eager."""

    def __init__(self, family, config):
        super().__init__()
        mod = getattr(transformers.models, family)
        prefix = {"llama": "Llama", "qwen2": "Qwen2", "gemma": "Gemma"}[family]
        modeling = getattr(mod, f"modeling_{family}")
        self._tec_config = config
        self.layer = getattr(modeling, f"{prefix}DecoderLayer")(config, 0)
        self.rotary = getattr(modeling, f"{prefix}RotaryEmbedding")(config)
        self.eager = config._attn_implementation == "eager"

    def forward(self, x):
        pos = torch.arange(x.shape[1]).unsqueeze(0)  # as LlamaModel makes them: one row for the batch
        cos_sin = self.rotary(x, pos)
        mask = additive_causal_mask(x) if self.eager else None
        out = self.layer(x, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
        return out[0] if isinstance(out, tuple) else out


class Gpt2Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self._tec_config = config
        self.block = transformers.models.gpt2.modeling_gpt2.GPT2Block(config, layer_idx=0)
        self.eager = config._attn_implementation == "eager"

    def forward(self, x):
        mask = additive_causal_mask(x) if self.eager else None
        out = self.block(x, attention_mask=mask)
        return out[0] if isinstance(out, tuple) else out


class BertLayer(nn.Module):
    """Bidirectional, post-LN, erf GELU; no mask (every token sees every token)."""

    def __init__(self, config):
        super().__init__()
        self._tec_config = config
        self.layer = transformers.models.bert.modeling_bert.BertLayer(config)

    def forward(self, x):
        out = self.layer(x)
        return out[0] if isinstance(out, tuple) else out


class CausalLm(nn.Module):
    """A whole causal LM, input_ids and attention_mask (1 = token, 0 = padding) -> logits, with
    use_cache=False, as a user exports one for a forward pass."""

    def __init__(self, family, config):
        super().__init__()
        self._tec_config = config
        cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
               "gpt2": transformers.GPT2LMHeadModel}[family]
        self.model = cls(config)

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


PAST = 6  # llama_lm_kv: the cached tokens before the 4 new ones


class CausalLmWithCache(nn.Module):
    """A causal LM exported with use_cache=True: input_ids of the new tokens and each layer's cached
    keys and values (past_key_values.L.key / .value, [B, kv heads, PAST, head dim]) -> logits and
    the grown cache (present.L.key / .value), as exports for generation have it. tec names such
    a model's cache inputs; --no-onnx-patterns compiles it as it is (issue 50)."""

    def __init__(self, config):
        super().__init__()
        self._tec_config = config
        self.model = transformers.LlamaForCausalLM(config)

    def forward(self, input_ids, *past):
        cache = transformers.DynamicCache(config=self._tec_config)
        for layer in range(LM_LAYERS):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        grown = out.past_key_values
        return (out.logits, *[t for layer in grown.layers for t in (layer.keys, layer.values)])


def models(attn):
    cfg = configs(attn)
    layers = {f"{f}_layer": (lambda f=f: DecoderLayer(f, cfg[f])) for f in ("llama", "qwen2", "gemma")}
    layers["gpt2_block"] = lambda: Gpt2Block(cfg["gpt2"])
    layers["bert_layer"] = lambda: BertLayer(cfg["bert"])
    lms = {f"{f}_lm": (lambda f=f: CausalLm(f, cfg[f])) for f in ("llama", "qwen2", "gpt2")}
    # The same LMs given token ids alone (no padding: one sequence, or all of one length).
    lms.update({f"{f}_lm_ids": (lambda f=f: CausalLm(f, cfg[f])) for f in ("llama", "qwen2", "gpt2")})
    lms["llama_lm_kv"] = lambda: CausalLmWithCache(cfg["llama"])
    return layers, lms


def example_inputs(name):
    g = torch.Generator().manual_seed(7)
    if name.endswith("_lm_kv"):
        cache = [(f"past_key_values.{l}.{kv}", torch.randn(BATCH, KV_HEADS, PAST, HEAD_DIM, generator=g))
                 for l in range(LM_LAYERS) for kv in ("key", "value")]
        return ((torch.randint(0, VOCAB, (BATCH, 4), generator=g), *[t for _, t in cache]), ["input_ids"] + [n for n, _ in cache],
                ["logits"] + [n.replace("past_key_values", "present") for n, _ in cache])
    if name.endswith("_lm_ids"):
        return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g),), ["input_ids"], ["logits"]
    if name.endswith("_lm"):
        ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
        mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
        mask[1, SEQ - 5:] = 0  # the second sequence is padded at its end
        return (ids, mask), ["input_ids", "attention_mask"], ["logits"]
    return (torch.randn(BATCH, SEQ, HIDDEN, generator=g),), ["x"], ["y"]


def export_one(model, inputs, names, outputs, path, exporter):
    kwargs = dict(input_names=names, output_names=outputs)
    if exporter == "dynamo":
        torch.onnx.export(model, inputs, path, dynamo=True, external_data=False, **kwargs)
    else:
        torch.onnx.export(model, inputs, path, dynamo=False, opset_version=17, **kwargs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated name prefixes (llama, gpt2_block, ...)")
    ap.add_argument("--exporters", default="dynamo,legacy")
    ap.add_argument("--attn", default="sdpa,eager")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = [o for o in args.only.split(",") if o]
    manifest = {"torch": torch.__version__, "transformers": transformers.__version__, "models": {}}
    path = os.path.join(args.out, "manifest.json")
    if only and os.path.exists(path):  # a partial export updates the folder's manifest
        previous = json.load(open(path))
        if (previous.get("torch"), previous.get("transformers")) == (manifest["torch"], manifest["transformers"]):
            manifest["models"] = previous["models"]
    for seed, attn in enumerate(args.attn.split(",")):
        layers, lms = models(attn)
        for index, (name, make) in enumerate({**layers, **lms}.items()):
            if only and not any(name.startswith(o) for o in only):
                continue
            model = seeded_(make().eval(), 1000 + index, 0.0 if name.startswith("gemma") else 1.0)
            inputs, names, outputs = example_inputs(name)
            for exporter in args.exporters.split(","):
                file = f"{name}.{attn}.{exporter}.onnx"
                entry = {"module": type(model).__name__, "attn": attn, "exporter": exporter,
                         "inputs": {n: list(t.shape) for n, t in zip(names, inputs)}}
                if "input_ids" in names:
                    entry["vocab"] = VOCAB
                try:
                    with torch.no_grad():
                        export_one(model, inputs, names, outputs, os.path.join(args.out, file), exporter)
                    entry["file"] = file
                    print(f"exported {file}", flush=True)
                except Exception as e:  # an exporter's refusal is a result: recorded, not hidden
                    entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                    print(f"REFUSED {file}: {entry['error']}", flush=True)
                    if os.environ.get("TEC_EXPORT_TRACE"):
                        traceback.print_exc()
                manifest["models"][file] = entry
    with open(path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
