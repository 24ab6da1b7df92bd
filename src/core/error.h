// Errors for every stage of tec (ARCHITECTURE.md §11). Inside the libraries errors are
// exceptions that carry the stage, the node, its source location and what was expected;
// the CLIs turn them into one line and a documented exit code.
#pragma once

#include <exception>
#include <sstream>
#include <string>

namespace tec {

// Where in tec's source an error was raised. SourceLocation needs a compiler builtin
// that clang 14 lacks with libstdc++; these two builtins exist in both GCC and clang.
struct SourceLocation {
  const char* file = "";
  int line = 0;
  static constexpr SourceLocation current(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return SourceLocation{file, line};
  }
  const char* file_name() const { return file; }
  int line_number() const { return line; }
};

// What the failure blames. Each maps to one exit code of the CLIs (see exit_code()).
enum class ErrorKind {
  usage,        // bad command line or API arguments
  invalid_input,// the model, graph or file is malformed or inconsistent
  unsupported,  // valid input that tec cannot handle (yet)
  compile,      // code generation or NVRTC failed
  io,           // a file could not be read or written
  device,       // no CUDA device, out of device memory, or a CUDA / cuBLASLt call failed
  device_lost,  // a sticky CUDA error (illegal address, ...): the context is unusable until restart
  internal,     // a bug in tec
};

const char* to_string(ErrorKind kind);
int exit_code(ErrorKind kind);

// Where an error happened: the pipeline stage, the node and where that node came from
// (a JSON pointer such as "graph.json /ops/1", or an ONNX node name).
struct ErrorContext {
  std::string stage;     // "json", "meta", "usage", ...
  std::string node;      // node or value name, may be empty
  std::string op;        // op type of the node, may be empty
  std::string location;  // source location, may be empty
};

class Error : public std::exception {
 public:
  Error(ErrorKind kind, ErrorContext context, std::string message,
        SourceLocation where = SourceLocation::current());

  ErrorKind kind() const { return kind_; }
  const ErrorContext& context() const { return context_; }
  const std::string& message() const { return message_; }
  const SourceLocation& where() const { return where_; }
  // "[meta] node 'fc1' (linear) at graph.json /ops/1: FP8 GEMM needs K divisible by 16, got K=4100"
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  ErrorKind kind_;
  ErrorContext context_;
  std::string message_;
  SourceLocation where_;
  std::string what_;
};

namespace detail {
// Collects a message with << and throws it: from raise() in the statement form
// (TEC_*_ERROR), from the destructor when the full expression ends in the check form
// (TEC_*_CHECK). Only ever used through the macros below.
//
// Building the message can itself throw (a reader asked for the name of the very field that is
// broken; bad_alloc). That exception is then already unwinding through this destructor, and a
// second throw would terminate the process, so the destructor lets the first one go on. That
// is also why the destructor is not [[noreturn]], and why the statement form, which callers
// rely on not to return, throws from the [[noreturn]] raise() instead.
class ErrorThrower {
 public:
  ErrorThrower(ErrorKind kind, ErrorContext context, SourceLocation where)
      : kind_(kind), context_(std::move(context)), where_(where), unwinding_at_start_(std::uncaught_exceptions()) {}
  ErrorThrower(const ErrorThrower&) = delete;
  ErrorThrower& operator=(const ErrorThrower&) = delete;
  template <typename T>
  ErrorThrower& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  [[noreturn]] void raise();
  ~ErrorThrower() noexcept(false);

 private:
  ErrorKind kind_;
  ErrorContext context_;
  SourceLocation where_;
  int unwinding_at_start_;
  bool raised_ = false;
  std::ostringstream stream_;
};
// Turns `thrower << ...` into a void expression so that a check is a single expression
// (no dangling else inside an unbraced if).
struct Voidify {
  void operator&(ErrorThrower&) {}
  void operator&(ErrorThrower&&) {}
};
}  // namespace detail

}  // namespace tec

// TEC_USER_CHECK blames the input; TEC_INTERNAL_CHECK blames tec. The context is an
// ErrorContext (or anything convertible to one).
//   TEC_USER_CHECK(k % 16 == 0, ctx) << "FP8 GEMM needs K divisible by 16, got K=" << k;
#define TEC_ERROR_KIND(kind, ctx) \
  ::tec::detail::ErrorThrower(kind, ctx, SourceLocation::current())
// Statement form, never returns: `TEC_USER_ERROR(ctx) << "...";`. The loop body streams the
// message, then its increment raises; it has no other way out.
#define TEC_ERROR_STATEMENT(kind, ctx) \
  for (::tec::detail::ErrorThrower tec_error_(kind, ctx, SourceLocation::current());; tec_error_.raise()) tec_error_
#define TEC_USER_ERROR(ctx) TEC_ERROR_STATEMENT(::tec::ErrorKind::invalid_input, ctx)
#define TEC_UNSUPPORTED(ctx) TEC_ERROR_STATEMENT(::tec::ErrorKind::unsupported, ctx)
#define TEC_INTERNAL_ERROR(ctx) TEC_ERROR_STATEMENT(::tec::ErrorKind::internal, ctx)
#define TEC_USER_CHECK(cond, ctx) \
  (cond) ? (void)0 : ::tec::detail::Voidify() & TEC_ERROR_KIND(::tec::ErrorKind::invalid_input, ctx)
#define TEC_USAGE_CHECK(cond, ctx) (cond) ? (void)0 : ::tec::detail::Voidify() & TEC_ERROR_KIND(::tec::ErrorKind::usage, ctx)
#define TEC_UNSUPPORTED_CHECK(cond, ctx) \
  (cond) ? (void)0 : ::tec::detail::Voidify() & TEC_ERROR_KIND(::tec::ErrorKind::unsupported, ctx)
#define TEC_INTERNAL_CHECK(cond, ctx)                                                       \
  (cond) ? (void)0                                                                          \
         : ::tec::detail::Voidify() & TEC_ERROR_KIND(::tec::ErrorKind::internal, ctx) << "internal check failed: " #cond ": "

namespace tec {
// Runs f; an Error thrown without a node or location (e.g. by a shape helper) is rethrown
// with `context`, so that low-level checks still name the node they failed for.
template <typename F>
auto with_context(const ErrorContext& context, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (!e.context().node.empty() || !e.context().location.empty()) throw;
    ErrorContext filled = context;
    if (filled.stage.empty()) filled.stage = e.context().stage;
    throw Error(e.kind(), filled, e.message(), e.where());
  }
}
}  // namespace tec
