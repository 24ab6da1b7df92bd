// What te-compile and te-run share: command-line parsing and turning errors into one line on
// stderr plus the documented exit code (README.md, "Exit codes").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

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

template <typename F>
int run_reporting_errors(const char* tool, F&& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", tool, e.what());
    return exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s\n", tool, e.what());
    return exit_code(ErrorKind::internal);
  }
}

}  // namespace tec::cli
