// What te-compile and te-run share: command-line parsing and turning errors into one line on
// stderr plus the documented exit code (docs/architecture.md, "Errors and exit codes").
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <optional>
#include <string>

#include "core/error.h"

namespace tec::cli {

// nullopt: go on; otherwise the exit code to return now (0 after --help or --version).
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : exit_code(ErrorKind::usage);
  }
}

// "NAME=VALUE" -> {NAME, VALUE}; a usage error naming the option otherwise.
inline std::pair<std::string, std::string> split_assignment(const std::string& text, const char* option) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error(ErrorKind::usage, {}, std::string(option) + " expects NAME=VALUE, got '" + text + "'");
  return {text.substr(0, eq), text.substr(eq + 1)};
}

// The whole text as a decimal integer in [lo, hi], or a usage error naming the option: no sign
// tricks, no wrap-around (--seed -1), no exponents (1e23), no trailing text.
inline int64_t parse_integer(const std::string& text, const std::string& option, int64_t lo, int64_t hi) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789", text[0] == '-' ? 1 : 0) == std::string::npos &&
                      text != "-";
  errno = 0;
  const long long v = digits ? std::strtoll(text.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || v < lo || v > hi)
    throw Error(ErrorKind::usage, {}, option + " takes a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + text + "'");
  return v;
}

// Adds NAME=VALUE to `into`; a name given twice is a usage error (the last one used to win
// silently).
template <typename T>
void add_once(std::map<std::string, T>& into, const std::string& name, T value, const std::string& option) {
  if (!into.emplace(name, std::move(value)).second)
    throw Error(ErrorKind::usage, {}, option + " " + name + " is given twice; give each once");
}

template <typename F>
int run_reporting_errors(const char* tool, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return exit_code(e.kind());
  } catch (const std::bad_alloc&) {
    // Sizes are checked against the machine's memory before the large allocations; this is
    // the rest (other processes took the memory, or many smaller ones add up).
    std::fprintf(stderr, "%s: error: out of host memory\n", tool);
    return exit_code(ErrorKind::device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return exit_code(ErrorKind::internal);
  }
}

}  // namespace tec::cli
