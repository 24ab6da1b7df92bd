// increment: the step counter of a train plan (exact up to 2^24 steps in fp32).
// adamw: the fused optimizer of a train plan (te-compile --optimizer adamw), one node over
// every parameter, as TE's FusedAdam (multi_tensor_adam, adam_w_mode): decoupled weight decay,
// bias-corrected moments, all in fp32. The compiler makes it (passes/autodiff.cpp); its
// hyperparameters are runtime scalars the caller may change between runs.
#include <cmath>

#include "ops/common.h"
#include "tec_math.h"

namespace tec {

namespace {

// Inputs: step, lr, beta1, beta2, eps, weight_decay (each fp32 [1]), then per parameter its
// master, main_grad, exp_avg and exp_avg_sq (fp32, one shape). Outputs: step + 1, then per
// parameter the new master, exp_avg, exp_avg_sq and the cleared main_grad.
constexpr int kScalars = 6;
constexpr int kPerParameter = 4;

InferResult infer_adamw(const InferContext& ctx) {
  const auto count = static_cast<int>(ctx.inputs.size());
  TEC_USER_CHECK(count > kScalars && (count - kScalars) % kPerParameter == 0, ctx.error)
      << "adamw takes " << kScalars << " scalars and 4 tensors per parameter, got " << count << " inputs";
  InferResult r;
  for (int i = 0; i < kScalars; ++i) {
    const TensorProto& s = ctx.inputs[static_cast<size_t>(i)];
    TEC_USER_CHECK(s.shape == Shape({1}) && s.dtype == DType::fp32 && !s.is_quantized(), ctx.error)
        << "adamw input " << i << " must be an fp32 scalar of shape [1], got " << s.shape.str() << " " << to_string(s.dtype);
  }
  r.outputs.push_back(ctx.inputs[0]);
  for (int p = kScalars; p < count; p += kPerParameter) {
    const TensorProto& master = ctx.inputs[static_cast<size_t>(p)];
    for (int j = 0; j < kPerParameter; ++j) {
      const TensorProto& t = ctx.inputs[static_cast<size_t>(p + j)];
      TEC_USER_CHECK(t.shape == master.shape && t.dtype == DType::fp32 && !t.is_quantized(), ctx.error)
          << "adamw input " << p + j << " must be fp32 of the master's shape " << master.shape.str() << ", got "
          << t.shape.str() << " " << to_string(t.dtype);
    }
    for (int j : {0, 2, 3, 1}) r.outputs.push_back(ctx.inputs[static_cast<size_t>(p + j)]);
  }
  return r;
}

// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t))
// + eps) + wd p), with t the step after the increment; then g = 0.
std::vector<HostTensor> reference_adamw(const Attributes&, const std::vector<HostTensor>& in) {
  const float step = in[0].values[0] + 1.0f;
  const float lr = in[1].values[0], beta1 = in[2].values[0], beta2 = in[3].values[0], eps = in[4].values[0],
              weight_decay = in[5].values[0];
  const float correction1 = 1.0f - tec_pow(beta1, step);
  const float correction2 = 1.0f - tec_pow(beta2, step);
  std::vector<HostTensor> out{HostTensor{in[0].shape, {step}}};
  for (size_t p = kScalars; p < in.size(); p += kPerParameter) {
    HostTensor master = in[p], m = in[p + 2], v = in[p + 3];
    const HostTensor& grad = in[p + 1];
    for (size_t i = 0; i < master.values.size(); ++i) {
      const float g = grad.values[i];
      m.values[i] = beta1 * m.values[i] + (1.0f - beta1) * g;
      v.values[i] = beta2 * v.values[i] + (1.0f - beta2) * g * g;
      const float update = (m.values[i] / correction1) / (tec_sqrt(v.values[i] / correction2) + eps) + weight_decay * master.values[i];
      master.values[i] -= lr * update;
    }
    HostTensor cleared{grad.shape, std::vector<float>(grad.values.size(), 0.0f)};
    out.push_back(std::move(master));
    out.push_back(std::move(m));
    out.push_back(std::move(v));
    out.push_back(std::move(cleared));
  }
  return out;
}

InferResult infer_increment(const InferContext& ctx) {
  const TensorProto& x = ctx.inputs[0];
  TEC_USER_CHECK(x.shape == Shape({1}) && x.dtype == DType::fp32, ctx.error)
      << "increment counts in an fp32 [1], got " << x.shape.str() << " " << to_string(x.dtype);
  return InferResult{{x}, {}, {}};
}

}  // namespace

void register_optimizer_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "increment",
      .summary = "a train plan's step counter + 1 (dropout draws a new mask every step)",
      .infer = infer_increment,
      .reference = [](const Attributes&, const std::vector<HostTensor>& in) {
        return std::vector<HostTensor>{HostTensor{in[0].shape, {in[0].values[0] + 1.0f}}};
      },
      .compiler_only = true,
  });
  registry.add(OpDef{
      .name = "adamw",
      .summary = "AdamW over every parameter of a train plan (made by te-compile --optimizer adamw)",
      .min_inputs = kScalars + kPerParameter,
      .max_inputs = kScalars + kPerParameter * 65536,
      .infer = infer_adamw,
      .reference = reference_adamw,
      .compiler_only = true,
  });
}

}  // namespace tec
