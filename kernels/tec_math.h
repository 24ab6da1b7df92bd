// Float math shared by the CPU reference and the GPU kernels, so that both compute the same
// bits: every function here uses only IEEE-754 +, -, *, / and sqrt in a fixed order (the
// host build uses -ffp-contract=off and NVRTC --fmad=false, so nothing is fused into an FMA).
// The C library's expf/tanhf/erff differ between glibc and CUDA in the last ulp; these are
// accurate to a few ulp, which is far below what any quantized recipe can resolve.
#pragma once

#if defined(__CUDACC__)
#define TEC_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#include <cstring>
#include <vector>
#define TEC_HD inline
#endif

// Threads of the row kernels (kernels/row.cu). The norm's row sums are defined by that
// block's reduction order, which the CPU reference replays: see tec_row_sum_order below.
#define TEC_ROW_THREADS 256

TEC_HD float tec_uint_as_float(unsigned u) {
#if defined(__CUDACC__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

TEC_HD float tec_rint(float x) {
#if defined(__CUDACC__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

TEC_HD float tec_fabs(float x) {
#if defined(__CUDACC__)
  return fabsf(x);
#else
  return std::fabs(x);
#endif
}

TEC_HD unsigned tec_float_as_uint(float x) {
#if defined(__CUDACC__)
  return __float_as_uint(x);
#else
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

// 2^n for n in [-126, 127], exactly.
TEC_HD float tec_pow2(int n) { return tec_uint_as_float((unsigned)(n + 127) << 23); }

// e^x: Cody-Waite reduction by ln 2, Cephes' degree-5 polynomial, exact scaling by 2^n.
TEC_HD float tec_exp(float x) {
  if (x != x) return x;
  if (x > 88.7228317f) return tec_uint_as_float(0x7F800000u);
  if (x < -103.972076f) return 0.0f;
  const float n = tec_rint(x * 1.44269504f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * (r * r);
  y = y + r;
  y = y + 1.0f;
  const int e = (int)n;  // in [-150, 128]: two exact factors keep subnormal results right
  const int half = e / 2;
  return (y * tec_pow2(half)) * tec_pow2(e - half);
}

TEC_HD float tec_tanh(float x) {
  const float a = tec_fabs(x);
  float t;
  if (a > 9.0f) {
    t = 1.0f;
  } else {
    const float e = tec_exp(a + a);
    t = 1.0f - 2.0f / (e + 1.0f);
  }
  return x < 0.0f ? -t : t;
}

// erf from the Chebyshev fit of erfc in Numerical Recipes (|error| < 1.2e-7).
TEC_HD float tec_erf(float x) {
  const float z = tec_fabs(x);
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = -0.82215223f + t * p;
  p = 1.48851587f + t * p;
  p = -1.13520398f + t * p;
  p = 0.27886807f + t * p;
  p = -0.18628806f + t * p;
  p = 0.09678418f + t * p;
  p = 0.37409196f + t * p;
  p = 1.00002368f + t * p;
  p = -1.26551223f + t * p;
  const float erfc = t * tec_exp(-z * z + p);
  return x >= 0.0f ? 1.0f - erfc : erfc - 1.0f;
}

TEC_HD float tec_sqrt(float x) {
#if defined(__CUDACC__)
  return sqrtf(x);  // correctly rounded: NVRTC's default --prec-sqrt=true
#else
  return std::sqrt(x);
#endif
}

// ln x: Cephes' logf (frexp to [sqrt(1/2), sqrt(2)), a degree-8 polynomial, ln 2 in two parts).
TEC_HD float tec_log(float x) {
  if (x != x) return x;
  if (x < 0.0f) return tec_uint_as_float(0x7FC00000u);
  if (x == 0.0f) return tec_uint_as_float(0xFF800000u);
  if (x == tec_uint_as_float(0x7F800000u)) return x;
  int e = 0;
  if (x < tec_uint_as_float(0x00800000u)) {  // subnormal: scale by 2^23 first, exactly
    x = x * 8388608.0f;
    e = -23;
  }
  const unsigned bits = tec_float_as_uint(x);
  e += (int)(bits >> 23) - 126;
  float m = tec_uint_as_float((bits & 0x007FFFFFu) | 0x3F000000u);  // x = m 2^e, m in [0.5, 1)
  if (m < 0.707106781f) {
    e -= 1;
    m = m + m - 1.0f;
  } else {
    m = m - 1.0f;
  }
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  const float fe = (float)e;
  y = y + -2.12194440e-4f * fe;
  y = y + -0.5f * z;
  float r = m + y;
  r = r + 0.693359375f * fe;
  return r;
}

// a^b as ONNX Pow: exact for b = 1 and 2 (x * x, the norms' square), else e^(b ln|a|) with the
// sign of an odd integer power; a negative base with a non-integer exponent is NaN.
TEC_HD float tec_pow(float a, float b) {
  const float inf = tec_uint_as_float(0x7F800000u);
  if (b == 0.0f || a == 1.0f) return 1.0f;
  if (a != a || b != b) return tec_uint_as_float(0x7FC00000u);
  if (b == 1.0f) return a;
  if (b == 2.0f) return a * a;
  const bool integer = tec_fabs(b) < 16777216.0f ? tec_rint(b) == b : true;
  const bool odd = integer && tec_fabs(b) < 16777216.0f && tec_fabs(b - 2.0f * tec_rint(0.5f * b)) == 1.0f;
  if (a < 0.0f && !integer) return tec_uint_as_float(0x7FC00000u);
  float r;
  if (a == 0.0f) r = b > 0.0f ? 0.0f : inf;
  else r = tec_exp(b * tec_log(tec_fabs(a)));
  return (tec_float_as_uint(a) >> 31) && odd ? -r : r;  // the sign of a, -0 included
}

// The general elementwise ops (`unary`, `binary`: src/ops/tensor_math.cpp), by code, for the CPU
// reference and the row kernel alike.
#define TEC_UNARY_SIGMOID 0
#define TEC_UNARY_TANH 1
#define TEC_UNARY_ERF 2
#define TEC_UNARY_SQRT 3
#define TEC_UNARY_RECIPROCAL 4
#define TEC_UNARY_NEG 5
#define TEC_UNARY_EXP 6
#define TEC_UNARY_LOG 7
#define TEC_UNARY_ABS 8
#define TEC_UNARY_COS 9
#define TEC_UNARY_SIN 10
#define TEC_BINARY_ADD 0
#define TEC_BINARY_SUB 1
#define TEC_BINARY_MUL 2
#define TEC_BINARY_DIV 3
#define TEC_BINARY_POW 4

TEC_HD void tec_sincos(double x, double* sine, double* cosine);  // (below, with rope)

// cos or sin of a float through tec_sincos's double arithmetic, rounded once; NaN for NaN and
// the infinities.
TEC_HD float tec_cos_or_sin(float x, bool sine) {
  const float a = tec_fabs(x);
  if (a != a || a == tec_uint_as_float(0x7F800000u)) return tec_uint_as_float(0x7FC00000u);
  double s, c;
  tec_sincos((double)a, &s, &c);
  return sine ? (float)(x < 0.0f ? -s : s) : (float)c;
}

TEC_HD float tec_apply_unary(int fn, float x) {
  switch (fn) {
    case TEC_UNARY_EXP: return tec_exp(x);
    case TEC_UNARY_LOG: return tec_log(x);
    case TEC_UNARY_ABS: return tec_fabs(x);
    case TEC_UNARY_COS: return tec_cos_or_sin(x, false);
    case TEC_UNARY_SIN: return tec_cos_or_sin(x, true);
    case TEC_UNARY_SIGMOID: return 1.0f / (1.0f + tec_exp(-x));
    case TEC_UNARY_TANH: return tec_tanh(x);
    case TEC_UNARY_ERF: return tec_erf(x);
    case TEC_UNARY_SQRT: return tec_sqrt(x);
    case TEC_UNARY_RECIPROCAL: return 1.0f / x;
    default: return -x;
  }
}

TEC_HD float tec_apply_binary(int fn, float a, float b) {
  switch (fn) {
    case TEC_BINARY_ADD: return a + b;
    case TEC_BINARY_SUB: return a - b;
    case TEC_BINARY_MUL: return a * b;
    case TEC_BINARY_DIV: return a / b;
    default: return tec_pow(a, b);
  }
}

// Comparisons and logic (`compare`: src/ops/compare.cpp), 1.0f for true and 0.0f for false,
// as ONNX's BOOL tensors hold them (uint8 0 or 1). A NaN compares unequal to everything.
#define TEC_COMPARE_EQUAL 0
#define TEC_COMPARE_LESS 1
#define TEC_COMPARE_LESS_EQUAL 2
#define TEC_COMPARE_GREATER 3
#define TEC_COMPARE_GREATER_EQUAL 4
#define TEC_COMPARE_ISNAN 5
#define TEC_COMPARE_NOT 6
#define TEC_COMPARE_AND 7
#define TEC_COMPARE_OR 8
#define TEC_COMPARE_XOR 9

TEC_HD float tec_apply_compare(int fn, float a, float b) {
  bool r;
  switch (fn) {
    case TEC_COMPARE_EQUAL: r = a == b; break;
    case TEC_COMPARE_LESS: r = a < b; break;
    case TEC_COMPARE_LESS_EQUAL: r = a <= b; break;
    case TEC_COMPARE_GREATER: r = a > b; break;
    case TEC_COMPARE_GREATER_EQUAL: r = a >= b; break;
    case TEC_COMPARE_ISNAN: r = a != a; break;
    case TEC_COMPARE_NOT: r = a == 0.0f; break;
    case TEC_COMPARE_AND: r = a != 0.0f && b != 0.0f; break;
    case TEC_COMPARE_OR: r = a != 0.0f || b != 0.0f; break;
    default: r = (a != 0.0f) != (b != 0.0f); break;
  }
  return r ? 1.0f : 0.0f;
}

// The general path's elementwise function (GeneralKernel::map, ir/general_kernel.h) by one code:
// a unary function, a binary one, a comparison, or where(a, b, c) (b where a holds, else c).
#define TEC_MAP_UNARY 0
#define TEC_MAP_BINARY 16
#define TEC_MAP_COMPARE 32
#define TEC_MAP_WHERE 48
#define TEC_MAP_CONVERT 49  // the value itself: the output's dtype converts it (convert)
#define TEC_MAP_GRAD 64      // + TEC_GRAD_*: a gradient's elementwise step (gradient_map)

// The elementwise steps of the general ops' gradients (`gradient_map`: src/ops/gradient.cpp),
// each named with the operands it reads: dy the output's gradient, x the forward input, y the
// forward output.
#define TEC_GRAD_SIGMOID 0        // (dy, y): dy y (1 - y)
#define TEC_GRAD_TANH 1           // (dy, y): dy (1 - y^2)
#define TEC_GRAD_ERF 2            // (dy, x): dy 2/sqrt(pi) exp(-x^2)
#define TEC_GRAD_SQRT 3           // (dy, y): dy 0.5 / y
#define TEC_GRAD_RECIPROCAL 4     // (dy, y): -dy y^2
#define TEC_GRAD_EXP 5            // (dy, y): dy y
#define TEC_GRAD_LOG 6            // (dy, x): dy / x
#define TEC_GRAD_ABS 7            // (dy, x): dy sign(x), 0 at 0
#define TEC_GRAD_COS 8            // (dy, x): -dy sin(x)
#define TEC_GRAD_SIN 9            // (dy, x): dy cos(x)
#define TEC_GRAD_DIV_DIVISOR 10   // (dy, y, b) of y = a / b: -dy y / b
#define TEC_GRAD_POW_BASE 11      // (dy, a, b) of y = a^b: dy b a^(b - 1)
#define TEC_GRAD_POW_EXPONENT 12  // (dy, y, a) of y = a^b: dy y log(a)
#define TEC_GRAD_SOFTMAX 13       // (dy, y, s), s = sum of dy y along the axis: y (dy - s)
#define TEC_GRAD_WHERE_TRUE 14    // (cond, dy): dy where cond holds, else 0
#define TEC_GRAD_WHERE_FALSE 15   // (cond, dy): 0 where cond holds, else dy
#define TEC_GRAD_MAX 16           // (dy, x, y) of y = max: dy where x is the maximum, else 0

TEC_HD float tec_apply_grad(int fn, float a, float b, float c) {
  switch (fn) {
    case TEC_GRAD_SIGMOID: return a * b * (1.0f - b);
    case TEC_GRAD_TANH: return a * (1.0f - b * b);
    case TEC_GRAD_ERF: return a * 1.1283791671f * tec_exp(-(b * b));
    case TEC_GRAD_SQRT: return a * 0.5f / b;
    case TEC_GRAD_RECIPROCAL: return -a * b * b;
    case TEC_GRAD_EXP: return a * b;
    case TEC_GRAD_LOG: return a / b;
    case TEC_GRAD_ABS: return b > 0.0f ? a : b < 0.0f ? -a : 0.0f;
    case TEC_GRAD_COS: return -a * tec_cos_or_sin(b, true);
    case TEC_GRAD_SIN: return a * tec_cos_or_sin(b, false);
    case TEC_GRAD_DIV_DIVISOR: return -a * b / c;
    case TEC_GRAD_POW_BASE: return a * c * tec_pow(b, c - 1.0f);
    case TEC_GRAD_POW_EXPONENT: return a * b * tec_log(c);
    case TEC_GRAD_SOFTMAX: return b * (a - c);
    case TEC_GRAD_WHERE_TRUE: return a != 0.0f ? b : 0.0f;
    case TEC_GRAD_WHERE_FALSE: return a != 0.0f ? 0.0f : b;
    default: return b == c ? a : 0.0f;
  }
}

TEC_HD float tec_apply_map(int code, float a, float b, float c) {
  if (code < TEC_MAP_BINARY) return tec_apply_unary(code - TEC_MAP_UNARY, a);
  if (code < TEC_MAP_COMPARE) return tec_apply_binary(code - TEC_MAP_BINARY, a, b);
  if (code < TEC_MAP_WHERE) return tec_apply_compare(code - TEC_MAP_COMPARE, a, b);
  if (code == TEC_MAP_WHERE) return a != 0.0f ? b : c;
  if (code >= TEC_MAP_GRAD) return tec_apply_grad(code - TEC_MAP_GRAD, a, b, c);
  return a;
}

// The general path's reductions (GeneralKernel::reduce). Max passes a NaN on, as ONNX's
// ReduceMax and a softmax's max do.
#define TEC_REDUCE_SUM 0
#define TEC_REDUCE_MEAN 1
#define TEC_REDUCE_MAX 2

TEC_HD float tec_max_nan(float a, float b) { return (a > b || a != a) ? a : b; }

// The activations, as TE defines them.
TEC_HD float tec_gelu_tanh(float x) {
  const float inner = 0.7978845608f * (x + 0.044715f * x * x * x);  // sqrt(2/pi)
  return 0.5f * x * (1.0f + tec_tanh(inner));
}
TEC_HD float tec_gelu_erf(float x) { return 0.5f * x * (1.0f + tec_erf(x * 0.70710678f)); }
TEC_HD float tec_relu(float x) { return x > 0.0f ? x : 0.0f; }
// SiLU and its derivative from one exp: both divide by 1 + e^-x (the derivative's sigmoid is
// its reciprocal), and swiglu's backward (kernels/row.cu) needs both of each element.
TEC_HD float tec_silu_denominator(float x) { return 1.0f + tec_exp(-x); }
TEC_HD float tec_silu_given(float x, float denominator) { return x / denominator; }
TEC_HD float tec_dsilu_given(float x, float denominator) {
  const float s = 1.0f / denominator;
  return s * (1.0f + x * (1.0f - s));
}
TEC_HD float tec_silu(float x) { return tec_silu_given(x, tec_silu_denominator(x)); }

// An activation by its kernels' code (TEC_ACT; src/codegen/lower.cpp's activation_code):
// 1 GELU (tanh), 2 GELU (erf), 3 ReLU, else SiLU. The gated ones (swiglu, geglu) apply it to
// the first half of the input's last dim and multiply by the second.
TEC_HD float tec_apply_activation(int code, float x) {
  switch (code) {
    case 1: return tec_gelu_tanh(x);
    case 2: return tec_gelu_erf(x);
    case 3: return tec_relu(x);
    default: return tec_silu(x);
  }
}

// Their derivatives, for the backward (train plans). d/dx of x * Phi(x) is Phi(x) + x * phi(x);
// of the tanh form, 0.5 (1 + t) + 0.5 x (1 - t^2) u' with u = sqrt(2/pi) (x + 0.044715 x^3).
TEC_HD float tec_dgelu_tanh(float x) {
  const float t = tec_tanh(0.7978845608f * (x + 0.044715f * x * x * x));
  const float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
}
TEC_HD float tec_dgelu_erf(float x) {
  return 0.5f * (1.0f + tec_erf(x * 0.70710678f)) + x * 0.3989422804f * tec_exp(-0.5f * x * x);
}
TEC_HD float tec_drelu(float x) { return x > 0.0f ? 1.0f : 0.0f; }
TEC_HD float tec_dsilu(float x) { return tec_dsilu_given(x, tec_silu_denominator(x)); }

// The seed of dropout's mask in training step `step` (the plan's step counter).
TEC_HD unsigned long long tec_dropout_seed(unsigned long long seed, unsigned long long step) {
  return seed ^ (step * 0xD1B54A32D192ED03ull);
}

// Dropout's keep decision for element `index` under `seed` (train plans): a counter-based hash
// (splitmix64's finaliser), so that any thread can draw any element, in any order.
TEC_HD bool tec_dropout_keep(unsigned long long seed, unsigned long long index, float p) {
  unsigned long long z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = (float)(z >> 40) * (1.0f / 16777216.0f);  // 24 bits: exact in float
  return u >= p;
}

// Rotary position embedding (the rope op): the pair (x1, x2) turned by the angle whose cosine
// and sine are c and s; the backward turns by -s. y1 and y2 may alias x1 and x2.
TEC_HD void tec_rope_rotate(float x1, float x2, float c, float s, float* y1, float* y2) {
  const float a = x1 * c - x2 * s, b = x2 * c + x1 * s;
  *y1 = a;
  *y2 = b;
}

// sin and cos of x >= 0 in double (Cephes' sin.c: reduction by pi/4 in three parts, exact for
// x below 2^29, and its degree-6 polynomials), accurate to about 1e-16: a rope angle is a
// position times a frequency, at most a few hundred thousand radians.
TEC_HD void tec_sincos(double x, double* sine, double* cosine) {
  const double sin_coef[6] = {1.58962301576546568060E-10, -2.50507477628578072866E-8, 2.75573136213857245213E-6,
                              -1.98412698295895385996E-4, 8.33333333332211858878E-3, -1.66666666666666307295E-1};
  const double cos_coef[6] = {-1.13585365213876817300E-11, 2.08757008419747316778E-9, -2.75573141792967388112E-7,
                              2.48015872888517045348E-5, -1.38888888888730564116E-3, 4.16666666666665929218E-2};
  double y = (double)(long long)(x * 1.27323954473516268615);  // floor(x / (pi / 4)), x >= 0
  long long j = (long long)y;
  if (j & 1) {  // to the even octant above: z is then in [-pi/4, pi/4]
    j += 1;
    y += 1.0;
  }
  j &= 7;
  const double z = ((x - y * 7.85398125648498535156E-1) - y * 3.77489470793079817668E-8) - y * 2.69515142907905952645E-15;
  const double zz = z * z;
  double sin_poly = sin_coef[0], cos_poly = cos_coef[0];
  for (int k = 1; k < 6; ++k) {
    sin_poly = sin_poly * zz + sin_coef[k];
    cos_poly = cos_poly * zz + cos_coef[k];
  }
  const double s = z + z * (zz * sin_poly), c = 1.0 - zz * 0.5 + zz * zz * cos_poly;
  const bool swap = j == 2 || j == 6;  // octants 2 and 6 (after rounding up to even): sin is cos
  const double sin_z = swap ? c : s, cos_z = swap ? s : c;
  *sine = j >= 4 ? -sin_z : sin_z;
  *cosine = (j == 2 || j == 4) ? -cos_z : cos_z;
}

// cos and sin of rope's angle position x inv_frequency, rounded once to float. inv_frequency
// (theta^(-2i / rotary_dim)) comes from the compiler, which passes the same double to the
// kernel; the rest is IEEE arithmetic, so the GPU's table is the reference's bit for bit.
TEC_HD void tec_rope_cos_sin(long long position, double inv_frequency, float* c, float* s) {
  double sine, cosine;
  tec_sincos((double)position * inv_frequency, &sine, &cosine);
  *c = (float)cosine;
  *s = (float)sine;
}

// An MoE router's choice for one token (moe_router): from the expert logits, the scores
// (softmax over every expert, or each expert's sigmoid), then the top k scores, highest first,
// ties to the lower expert index; normalize: the k weights divided by their sum. Sums run
// left to right over the experts, so one GPU thread per token gives the reference's bits.
#define TEC_SCORE_SOFTMAX 0
#define TEC_SCORE_SIGMOID 1
TEC_HD void tec_router_select(float* scores, int experts, int k, int score_function, int normalize, float* weights,
                              int* indices) {
  if (score_function == TEC_SCORE_SOFTMAX) {
    float max = scores[0];
    for (int e = 1; e < experts; ++e) max = scores[e] > max ? scores[e] : max;
    float sum = 0.0f;
    for (int e = 0; e < experts; ++e) {
      scores[e] = tec_exp(scores[e] - max);
      sum = sum + scores[e];
    }
    for (int e = 0; e < experts; ++e) scores[e] = scores[e] / sum;
  } else {
    for (int e = 0; e < experts; ++e) scores[e] = 1.0f / (1.0f + tec_exp(-scores[e]));
  }
  float total = 0.0f;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < experts; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || indices[i] == e;
      // NaN scores (a NaN token) lose to every number, and the lowest free index wins then.
      if (!taken && (best < 0 || scores[e] > scores[best] || (scores[best] != scores[best] && scores[e] == scores[e]))) best = e;
    }
    indices[j] = best;
    weights[j] = scores[best];
    total = total + weights[j];
  }
  if (normalize)
    for (int j = 0; j < k; ++j) weights[j] = weights[j] / total;
}

// Column sums over the rows of a [rows, cols] matrix (dbias, dgamma, dbeta) in the order the
// GPU's two column kernels (kernels/column_sum.cu) add them: rows in chunks of
// TEC_COLUMN_CHUNK_ROWS, each chunk summed top-down into a partial, then the partials top-down.
// Deterministic, and parallel enough for the GPU: each chunk of each column is one thread.
#define TEC_COLUMN_CHUNK_ROWS 64

#if !defined(__CUDACC__)
// The sum of x[0..n) in the order a TEC_ROW_THREADS block reduces it on the GPU: thread t
// adds x[t], x[t + 256], ... left to right; each warp of 32 combines by halving offsets
// (16, 8, 4, 2, 1); then the 8 warp sums combine the same way (4, 2, 1).
template <typename Get>
float tec_row_sum_order(long long n, Get get) {
  float lane[TEC_ROW_THREADS] = {};
  for (long long i = 0; i < n; ++i) lane[i % TEC_ROW_THREADS] += get(i);
  float warp[TEC_ROW_THREADS / 32];
  for (int w = 0; w < TEC_ROW_THREADS / 32; ++w) {
    float* v = lane + 32 * w;
    for (int offset = 16; offset > 0; offset /= 2)
      for (int t = 0; t < offset; ++t) v[t] = v[t] + v[t + offset];
    warp[w] = v[0];
  }
  for (int offset = TEC_ROW_THREADS / 64; offset > 0; offset /= 2)
    for (int t = 0; t < offset; ++t) warp[t] = warp[t] + warp[t + offset];
  return warp[0];
}

// out[c] = the sum over r of get(r, c), in the column kernels' order (TEC_COLUMN_CHUNK_ROWS).
template <typename Get>
void tec_column_sum_order(long long rows, long long cols, float* out, Get get) {
  for (long long c = 0; c < cols; ++c) out[c] = 0.0f;
  std::vector<float> partial(static_cast<size_t>(cols));
  for (long long begin = 0; begin < rows; begin += TEC_COLUMN_CHUNK_ROWS) {
    for (long long c = 0; c < cols; ++c) partial[c] = 0.0f;
    const long long end = begin + TEC_COLUMN_CHUNK_ROWS < rows ? begin + TEC_COLUMN_CHUNK_ROWS : rows;
    for (long long r = begin; r < end; ++r)
      for (long long c = 0; c < cols; ++c) partial[c] += get(r, c);
    for (long long c = 0; c < cols; ++c) out[c] += partial[c];
  }
}
#endif
