# A 1B-class causal LM (bench/results/causal_lm_1b.md): Llama 3.2 1B's shapes (16 layers, hidden 2048, 32/8 heads of 64,
# ffn 8192, vocab 128256, tied embeddings), random weights, bf16, transformers' own
# LlamaForCausalLM (sdpa), exported by the dynamo exporter (input_ids [1, 2048] -> logits), then
# timed in PyTorch on this GPU: eager and torch.compile, CUDA events, median of 50 after warm-up.
import json, os, sys, time, statistics, torch, transformers
out, mode = sys.argv[1], sys.argv[2]  # mode: export | bench
torch.manual_seed(0)
cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                               num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                               rope_theta=500000.0, max_position_embeddings=4096, rms_norm_eps=1e-5)
cfg._attn_implementation = "sdpa"
m = transformers.LlamaForCausalLM(cfg)
with torch.no_grad():
    for n, p in m.named_parameters():
        p.copy_(torch.randn_like(p) * 0.02 + (1.0 if "norm" in n else 0.0))
inv = m.model.rotary_emb.inv_freq.clone()
m = m.to(torch.bfloat16).eval()
m.model.rotary_emb.inv_freq = inv.float()  # as from_pretrained(torch_dtype=bf16) leaves it
ids = torch.randint(0, cfg.vocab_size, (1, 2048))
class Ids(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, input_ids): return s.m(input_ids=input_ids, use_cache=False).logits
if mode == "export":
    t = time.time()
    with torch.no_grad():
        torch.onnx.export(Ids(m), (ids,), out, dynamo=True, external_data=True, input_names=["input_ids"], output_names=["logits"])
    print(f"exported {out} in {time.time() - t:.0f} s", flush=True)
    sys.exit(0)
model = Ids(m).cuda()
x = ids.cuda()
def timed(f, n=50, warm=10):
    with torch.no_grad():
        for _ in range(warm): f(x)
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); f(x); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1000)
    return statistics.median(ts)
res = {"eager_bf16_us": timed(model)}
print("eager bf16 median us", res["eager_bf16_us"], flush=True)
t = time.time()
c = torch.compile(model)
with torch.no_grad(): c(x)
res["compile_s"] = time.time() - t
res["compile_bf16_us"] = timed(c)
print("torch.compile bf16 median us", res["compile_bf16_us"], f"(compiled in {res['compile_s']:.0f} s)", flush=True)
json.dump(res, open(out, "w"))
