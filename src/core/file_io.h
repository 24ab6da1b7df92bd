// Every file tec reads or writes goes through here (issue 51), so that the rules hold in one
// place:
// - reads are bounded: a file's size is checked against the caller's limit before anything is
//   allocated, pipes are read up to it, and directories and devices are refused (/dev/zero
//   would otherwise be read until the machine runs out of memory);
// - writes go to a temporary file in the same folder and a rename, so a failure or a signal
//   never leaves a half-written file under the final name; the CLIs remove the temporary file
//   on SIGINT/SIGTERM/SIGHUP, and the next write removes one a killed process left behind;
// - names taken from a model (output tensor names) become file names only through
//   file_name_for, which keeps them inside the folder they are written to.
// I/O failures are Error(io) naming the path: exit code 6, never 70.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"

namespace tec {

struct ReadLimits {
  uint64_t max_bytes = 0;
  bool allow_pipe = false;  // a FIFO (process substitution, a pipe) read up to max_bytes
};

// The whole file. Errors: io (missing, a directory, a device, unreadable), invalid_input (over
// the limit); `what` names the kind of file in messages ("plan file", "graph file").
std::vector<uint8_t> read_file(const std::string& path, const ReadLimits& limits, const std::string& what,
                               const ErrorContext& context);

// The size of a regular file; io errors for anything else, naming `what`.
uint64_t regular_file_size(const std::string& path, const std::string& what, const ErrorContext& context);

// Writes through a temporary file and a rename. "-" writes to stdout; an existing
// non-regular file (/dev/stdout, a FIFO) is written directly.
void write_file_atomically(const std::string& path, std::span<const std::span<const uint8_t>> pieces);
void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);
void write_text_file(const std::string& path, const std::string& text);

// Creates `dir` (and its parents) for files to be written into; io error naming it when it
// cannot be, or when it exists and is no folder.
void create_output_folder(const std::string& dir, const std::string& option);

// For the CLIs: on SIGINT, SIGTERM or SIGHUP remove the temporary files of writes in flight,
// then die of the signal as before. Only where the signal's action is still the default.
void remove_temporary_files_on_signals();

// The longest file name file_name_for gives (most file systems take 255 bytes).
inline constexpr size_t kMaxFileNameBytes = 200;

// A file name for a tensor (or any name from a model): bytes outside [A-Za-z0-9_.+=@,-] are
// written %XX, and so is a leading '.', so that no name is a path, "..", hidden, or holds a
// NUL; distinct names give distinct files. A name whose file name would exceed
// kMaxFileNameBytes is refused, naming the tensor. `suffix` (".npy") is appended.
std::string file_name_for(const std::string& name, const std::string& suffix);

}  // namespace tec
