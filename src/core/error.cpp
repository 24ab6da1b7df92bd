#include "core/error.h"

namespace tec {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return "usage error";
    case ErrorKind::invalid_input: return "invalid input";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::compile: return "compile error";
    case ErrorKind::io: return "I/O error";
    case ErrorKind::device: return "device error";
    case ErrorKind::device_lost: return "device lost";
    case ErrorKind::internal: return "internal error";
  }
  return "error";
}

// Exit codes are part of the CLI contract; docs/architecture.md and docs/cli.md document them.
int exit_code(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return 2;
    case ErrorKind::invalid_input: return 3;
    case ErrorKind::unsupported: return 4;
    case ErrorKind::compile: return 5;
    case ErrorKind::io: return 6;
    case ErrorKind::device: return 7;
    case ErrorKind::device_lost: return 8;
    case ErrorKind::internal: return 70;
  }
  return 70;
}

static std::string describe(ErrorKind kind, const ErrorContext& ctx, const std::string& message,
                            const SourceLocation& where) {
  std::ostringstream out;
  if (!ctx.stage.empty()) out << "[" << ctx.stage << "] ";
  if (!ctx.node.empty()) {
    out << "node '" << ctx.node << "'";
    if (!ctx.op.empty()) out << " (" << ctx.op << ")";
    out << " ";
  }
  if (!ctx.location.empty()) out << "at " << ctx.location << " ";
  std::string head = out.str();
  if (!head.empty()) head.back() = ':';
  std::string text = head.empty() ? message : head + " " + message;
  if (kind == ErrorKind::internal) {
    text += " (tec bug at " + std::string(where.file_name()) + ":" + std::to_string(where.line_number()) +
            ", please report it)";
  }
  return text;
}

Error::Error(ErrorKind kind, ErrorContext context, std::string message, SourceLocation where)
    : kind_(kind),
      context_(std::move(context)),
      message_(std::move(message)),
      where_(where),
      what_(describe(kind_, context_, message_, where_)) {}

namespace detail {
void ErrorThrower::raise() {
  raised_ = true;
  throw Error(kind_, std::move(context_), stream_.str(), where_);
}

ErrorThrower::~ErrorThrower() noexcept(false) {
  if (!raised_ && std::uncaught_exceptions() == unwinding_at_start_) raise();
}
}  // namespace detail

}  // namespace tec
