#include "ir/runtime_scalars.h"

#include <array>
#include <cmath>
#include <iomanip>
#include <sstream>

namespace tec {

namespace {

// PyTorch's AdamW checks lr >= 0, eps >= 0, betas in [0, 1) and weight_decay >= 0; tec is
// stricter where a value is legal there and still NaN here (eps = 0 divides 0 by 0 where a
// gradient is 0) and bounds what no training run uses (lr > 1000, weight decay > 1).
constexpr std::array kRanges{
    RuntimeScalarRange{"first_microbatch", 0, 1, false, false, true,
                       "1 remakes the weights' copies from the masters, 0 reuses them (TE's is_first_microbatch)"},
    RuntimeScalarRange{"forward_only", 0, 1, false, false, true, "1 runs the weight copies and the forward only"},
    RuntimeScalarRange{"optimizer.step", 0, 16777215, false, false, true,
                       "AdamW's step count, counted in fp32 (exact below 2^24)"},
    RuntimeScalarRange{"optimizer.lr", 0, 1000, false, false, false, "the learning rate"},
    RuntimeScalarRange{"optimizer.beta1", 0, 1, false, true, false, "AdamW's first-moment decay"},
    RuntimeScalarRange{"optimizer.beta2", 0, 1, false, true, false, "AdamW's second-moment decay"},
    RuntimeScalarRange{"optimizer.eps", 0, 1, true, false, false, "added to sqrt(v)"},
    RuntimeScalarRange{"optimizer.weight_decay", 0, 1, false, false, false, "AdamW's decoupled weight decay"},
};

}  // namespace

const RuntimeScalarRange* runtime_scalar_range(std::string_view name) {
  for (const RuntimeScalarRange& r : kRanges)
    if (r.name == name) return &r;
  return nullptr;
}

std::optional<std::string> runtime_scalar_error(std::string_view name, float value) {
  const RuntimeScalarRange* r = runtime_scalar_range(name);
  if (!r) return std::nullopt;
  const double v = value;
  const bool inside = std::isfinite(v) && (r->lo_open ? v > r->lo : v >= r->lo) && (r->hi_open ? v < r->hi : v <= r->hi) &&
                      (!r->integer || v == std::floor(v));
  if (inside) return std::nullopt;
  std::ostringstream out;
  out << std::setprecision(10);
  out << name << " (" << r->meaning << ") must be ";
  if (r->integer && r->lo == 0 && r->hi == 1) out << "0 or 1";
  else out << (r->integer ? "a whole number in " : "in ") << (r->lo_open ? "(" : "[") << r->lo << ", " << r->hi << (r->hi_open ? ")" : "]");
  out << ", got " << value;
  return out.str();
}

}  // namespace tec
