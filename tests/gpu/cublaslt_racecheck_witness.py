# The same GEMMs as examples/mlp.json at T=16 (fc1 4096 -> 16384, fc2 16384 -> 4096), in FP8
# (per-tensor scales) and BF16, issued by PyTorch, which also calls cuBLASLt, and the attention of
# examples/llama_layer_small.json through PyTorch's cuDNN SDPA: no tec code runs. sanitize.sh runs
# it under racecheck next to tec's plans, so that a hazard inside cuBLASLt's or cuDNN's own kernels
# can be told apart from one that tec's use of them causes.
#   compute-sanitizer --tool racecheck python3 tests/gpu/cublaslt_racecheck_witness.py
import torch

torch.manual_seed(0)
T, H, F = 16, 4096, 16384
device = "cuda"
fp8 = torch.float8_e4m3fn
one = torch.ones((), device=device)


def fp8_linear(x, weight, out_dtype):
    # _scaled_mm wants the second operand column-major: weight is [out, in], so weight.t().
    return torch._scaled_mm(x.to(fp8), weight.to(fp8).t(), scale_a=one, scale_b=one, out_dtype=out_dtype)


x = torch.randn(T, H, device=device, dtype=torch.bfloat16)
w1 = torch.randn(F, H, device=device, dtype=torch.bfloat16) * 0.02
w2 = torch.randn(H, F, device=device, dtype=torch.bfloat16) * 0.02
for _ in range(2):
    h = fp8_linear(x, w1, torch.bfloat16)
    y = fp8_linear(h, w2, torch.bfloat16)
    hb = x @ w1.t()
    yb = hb @ w2.t()
# Causal GQA attention, 8 query and 2 kv heads of 64, 128 tokens, in tec's [B, S, heads x D] layout.
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

q = torch.randn(2, 128, 8, 64, device=device, dtype=torch.bfloat16).transpose(1, 2)
kv = torch.randn(2, 128, 2, 64, device=device, dtype=torch.bfloat16).transpose(1, 2)
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(2):
        o = torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
torch.cuda.synchronize()
print("witness GEMMs and attention ran:", tuple(y.shape), tuple(yb.shape), tuple(o.shape))
