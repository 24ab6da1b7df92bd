// AdamW over the parameters of a train plan, as reference_adamw (src/ops/optimizer.cpp) and
// TE's FusedAdam compute it: every float operation the reference's, in its order.
//   tec_adamw_prepare (one thread): step += 1, and the coefficients every element needs
//     (lr, beta1, beta2, eps, weight decay, 1 - beta1^step, 1 - beta2^step) to slot 6.
//     Slots: 0 step, 1 lr, 2 beta1, 3 beta2, 4 eps, 5 weight_decay, 6 coefficients [8].
//   tec_adamw: grid (x, TEC_ADAMW_PARAMS), block y = one parameter, its elements strided over
//     block x. Slots: 0 the coefficients, then per parameter master, main_grad, exp_avg,
//     exp_avg_sq; main_grad is cleared for the next step's accumulation.
#include "common.cuh"
#include "tec_math.h"

struct TecAdamwArgs {
  unsigned long long slot[64];
};

extern "C" __global__ void tec_adamw_prepare(TecAdamwArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float* step = (float*)args.slot[0];
  const float t = *step + 1.0f;
  const float beta1 = *(const float*)args.slot[2], beta2 = *(const float*)args.slot[3];
  float* coef = (float*)args.slot[6];
  coef[0] = *(const float*)args.slot[1];
  coef[1] = beta1;
  coef[2] = beta2;
  coef[3] = *(const float*)args.slot[4];
  coef[4] = *(const float*)args.slot[5];
  coef[5] = 1.0f - tec_pow(beta1, t);
  coef[6] = 1.0f - tec_pow(beta2, t);
  *step = t;
}

extern "C" __global__ void __launch_bounds__(256) tec_adamw(TecAdamwArgs args) {
  tec_allow_next_kernel();
  tec_wait_for_previous_kernel();
  const i64 numel[] = {TEC_ADAMW_NUMEL};
  const int p = blockIdx.y;
  const float* coef = (const float*)args.slot[0];
  const float lr = coef[0], beta1 = coef[1], beta2 = coef[2], eps = coef[3], weight_decay = coef[4];
  const float correction1 = coef[5], correction2 = coef[6];
  float* master = (float*)args.slot[1 + 4 * p];
  float* grad = (float*)args.slot[2 + 4 * p];
  float* m = (float*)args.slot[3 + 4 * p];
  float* v = (float*)args.slot[4 + 4 * p];
  for (i64 i = (i64)blockIdx.x * 256 + threadIdx.x; i < numel[p]; i += (i64)gridDim.x * 256) {
    const float g = grad[i];
    const float m1 = beta1 * m[i] + (1.0f - beta1) * g;
    const float v1 = beta2 * v[i] + (1.0f - beta2) * g * g;
    const float update = (m1 / correction1) / (tec_sqrt(v1 / correction2) + eps) + weight_decay * master[i];
    master[i] = master[i] - lr * update;
    m[i] = m1;
    v[i] = v1;
    grad[i] = 0.0f;
  }
}
