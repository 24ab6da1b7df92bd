// JSON from untrusted files (graphs, plan manifests, safetensors headers): every reader parses
// through parse_json_text, which refuses nesting deeper than kMaxJsonDepth before nlohmann
// builds anything, and every error quotes a value through json_excerpt, never dump(): dump()
// recurses once per level and prints the whole value (issue 51: a 100,000-deep attribute
// crashed te-compile in the error path).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tec {

// The deepest nesting of arrays and objects any tec reader accepts. tec's own files nest
// at most ~8 levels (a manifest's launch argument inside a launch inside a profile).
inline constexpr int kMaxJsonDepth = 64;

// The longest string (a name, an op type, a path) a graph, manifest or model may hold: errors
// quote names, so this bounds every error line.
inline constexpr size_t kMaxStringBytes = 4096;

// `text` cut to `max_chars` with "..." for error messages.
std::string text_excerpt(const std::string& text, size_t max_chars = 64);

// Parses `text`; malformed JSON, nesting deeper than kMaxJsonDepth, or a string or key longer
// than `max_string_bytes` throws Error(invalid_input) with `context`, its location extended by
// ":line:column" of the fault (or by the JSON pointer of the long string).
nlohmann::json parse_json_text(std::string_view text, const ErrorContext& context, size_t max_string_bytes = kMaxStringBytes);

// The deepest nesting in `text` (arrays and objects, strings skipped); stops counting once it
// passes `limit` and returns the byte offset where it did through `at`.
int json_nesting_depth(std::string_view text, int limit, size_t* at = nullptr);

// `value` as JSON text of at most about `max_chars` characters: long strings and arrays are
// cut with "...", and nesting below three levels shows as [...] / {...}. For error messages.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace tec
