#include "core/json_text.h"

#include <optional>

namespace tec {

namespace {

std::string line_and_column(std::string_view text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

ErrorContext at_byte(const ErrorContext& context, std::string_view text, size_t byte) {
  ErrorContext out = context;
  out.location += ":" + line_and_column(text, byte);
  return out;
}

void excerpt_into(const nlohmann::json& v, std::string& out, size_t max_chars, int depth) {
  if (out.size() > max_chars) return;
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    const bool cut = s.size() > max_chars;
    std::string shown = nlohmann::json(cut ? s.substr(0, max_chars) : s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (cut) shown.insert(shown.size() - 1, "...");
    out += shown;
    return;
  }
  if (!v.is_structured()) {
    out += v.dump();
    return;
  }
  const bool array = v.is_array();
  if (depth >= 3) {
    out += array ? "[...]" : "{...}";
    return;
  }
  out += array ? '[' : '{';
  bool first = true;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    if (out.size() > max_chars) {
      out += "...";
      break;
    }
    if (!array) {
      excerpt_into(nlohmann::json(it.key()), out, max_chars, depth + 1);
      out += ": ";
    }
    excerpt_into(*it, out, max_chars, depth + 1);
  }
  out += array ? ']' : '}';
}

}  // namespace

int json_nesting_depth(std::string_view text, int limit, size_t* at) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) {
        if (at) *at = i;
        return deepest;
      }
    } else if (c == ']' || c == '}') {
      --depth;  // unbalanced text is the parser's to report
    }
  }
  return deepest;
}

// The JSON pointer of the first string or key longer than `limit`, or nothing.
std::optional<std::string> long_string(const nlohmann::json& j, size_t limit, const std::string& pointer) {
  if (j.is_string()) return j.get_ref<const std::string&>().size() > limit ? std::optional(pointer) : std::nullopt;
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key().size() > limit) return pointer + "/" + text_excerpt(it.key());
      if (auto found = long_string(*it, limit, pointer + "/" + it.key())) return found;
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      if (auto found = long_string(j[i], limit, pointer + "/" + std::to_string(i))) return found;
  }
  return std::nullopt;
}

nlohmann::json parse_json_text(std::string_view text, const ErrorContext& context, size_t max_string_bytes) {
  size_t deep_at = 0;
  TEC_USER_CHECK(json_nesting_depth(text, kMaxJsonDepth, &deep_at) <= kMaxJsonDepth, at_byte(context, text, deep_at))
      << "JSON nested deeper than " << kMaxJsonDepth << " levels; tec reads at most " << kMaxJsonDepth;
  try {
    nlohmann::json doc = nlohmann::json::parse(text);
    if (const auto at = long_string(doc, max_string_bytes, "")) {
      ErrorContext where = context;
      where.location += " " + *at;
      TEC_USER_ERROR(where) << "a string or key longer than " << max_string_bytes << " bytes; names and paths are at most that";
    }
    return doc;
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    // nlohmann prefixes "[json.exception.parse_error.101] parse error at line 1, column 2: "
    if (auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    TEC_USER_ERROR(at_byte(context, text, e.byte ? e.byte - 1 : 0)) << "malformed JSON: " << what;
  } catch (const nlohmann::json::exception& e) {
    // Not only parse_error: a number too large for 64 bits is an out_of_range (found by
    // tests/fuzz/json_frontend_fuzz).
    std::string what = e.what();
    if (auto bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
    TEC_USER_ERROR(context) << "malformed JSON: " << what;
  }
}

std::string text_excerpt(const std::string& text, size_t max_chars) {
  return text.size() <= max_chars ? text : text.substr(0, max_chars) + "...";
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string out;
  excerpt_into(value, out, max_chars, 0);
  return out;
}

}  // namespace tec
