// A train plan's runtime scalars (ARCHITECTURE.md §12): fp32 state tensors of shape [1] that a
// caller may set between runs. One table of the values each may take, used wherever one is
// set: te-compile (the values a plan starts with), the plan reader, te-run --scalar,
// Session::set_scalar and the C API. A value outside it (beta1 = 1, step = -1, eps = 0) makes
// every weight NaN with no error, so it is refused where it is given.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tec {

struct RuntimeScalarRange {
  std::string_view name;
  double lo, hi;
  bool lo_open, hi_open;  // (lo, ...: lo itself is outside
  bool integer;           // whole numbers only
  std::string_view meaning;
};

// Every runtime scalar tec defines (first_microbatch, forward_only, optimizer.*).
const RuntimeScalarRange* runtime_scalar_range(std::string_view name);

// Why `value` is no valid `name` (as the plan stores it: a float), or nothing when it is.
// Names tec does not define pass: the plan reader refuses those separately.
std::optional<std::string> runtime_scalar_error(std::string_view name, float value);

}  // namespace tec
