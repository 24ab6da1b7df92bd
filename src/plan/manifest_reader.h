// Reading a plan manifest (schemas/plan.schema.json): typed fields of one JSON object, each
// error naming its path, and a launch's buffer references. plan.cpp reads the manifest with it,
// gemm_launch.cpp a GEMM launch.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_text.h"
#include "plan/plan.h"

namespace tec::plan {

using json = nlohmann::json;

// Reads fields of one manifest object; errors name the JSON path.
class Reader {
 public:
  Reader(const json& j, std::string path, const std::string& file) : j_(j), path_(std::move(path)), file_(file) {
    TEC_USER_CHECK(j_.is_object(), ctx()) << "expected an object";
  }
  ErrorContext ctx(const std::string& key = "") const {
    return ErrorContext{"plan", "", "", file_ + " manifest " + path_ + (key.empty() ? "" : "/" + key)};
  }
  const json& field(const std::string& key) const {
    TEC_USER_CHECK(j_.contains(key), ctx()) << "missing field '" << key << "'";
    return j_[key];
  }
  bool contains(const std::string& key) const { return j_.contains(key); }
  std::string optional_str(const std::string& key) const { return j_.contains(key) ? str(key) : std::string(); }
  int64_t optional_integer(const std::string& key, int64_t lo, int64_t hi) const { return j_.contains(key) ? integer(key, lo, hi) : 0; }
  bool optional_boolean(const std::string& key) const {
    if (!j_.contains(key)) return false;
    TEC_USER_CHECK(j_[key].is_boolean(), ctx(key)) << "expected a boolean, got " << json_excerpt(j_[key]);
    return j_[key].get<bool>();
  }
  bool boolean(const std::string& key) const {
    TEC_USER_CHECK(field(key).is_boolean(), ctx(key)) << "expected a boolean, got " << json_excerpt(field(key));
    return field(key).get<bool>();
  }
  double number(const std::string& key) const {
    TEC_USER_CHECK(field(key).is_number(), ctx(key)) << "expected a number, got " << json_excerpt(field(key));
    return field(key).get<double>();
  }
  std::string str(const std::string& key) const {
    TEC_USER_CHECK(field(key).is_string(), ctx(key)) << "expected a string";
    return field(key).get<std::string>();
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const {
    const json& v = field(key);
    TEC_USER_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi, ctx(key))
        << "expected an integer in [" << lo << ", " << hi << "], got " << json_excerpt(v);
    return v.get<int64_t>();
  }
  const json& array(const std::string& key) const {
    TEC_USER_CHECK(field(key).is_array(), ctx(key)) << "expected an array";
    return field(key);
  }
  std::vector<std::string> strings(const std::string& key) const {
    std::vector<std::string> out;
    for (const auto& v : array(key)) {
      TEC_USER_CHECK(v.is_string(), ctx(key)) << "expected strings";
      out.push_back(v.get<std::string>());
    }
    return out;
  }
  Shape shape(const std::string& key) const {
    Shape s;
    for (const auto& d : array(key)) {
      TEC_USER_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() <= kMaxDim, ctx(key))
          << "shape entries must be integers in [0, " << kMaxDim << "]";
      s.dims.push_back(d.get<int64_t>());
    }
    TEC_USER_CHECK(s.rank() <= 8, ctx(key)) << "rank " << s.rank() << " exceeds 8";
    with_context(ctx(key), [&] { (void)s.numel(); });
    return s;
  }
  DType dtype(const std::string& key) const {
    auto d = parse_dtype(str(key));
    TEC_USER_CHECK(d.has_value(), ctx(key)) << "unknown dtype";
    return *d;
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& file_;
};

// A launch's buffer references into profile `p`: null or an index; `writable` ones may not
// point at the constants.
struct BufferRefs {
  const Reader& r;
  const Profile& p;
  int ref(const json& v, const std::string& key, bool writable) const {
    const int buffer_count = static_cast<int>(p.buffers.size());
    if (v.is_null()) return -1;
    TEC_USER_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < buffer_count, r.ctx(key))
        << "expected null or a buffer index below " << buffer_count << ", got " << json_excerpt(v);
    const int i = v.get<int>();
    TEC_USER_CHECK(!writable || p.buffers[static_cast<size_t>(i)].region != "constants", r.ctx(key))
        << "a launch writes buffer '" << p.buffers[static_cast<size_t>(i)].name << "', which is a constant";
    return i;
  }
  int64_t bytes_of(int i) const { return i < 0 ? int64_t{0} : p.buffers[static_cast<size_t>(i)].bytes; }
};

// A launch's "gemm" object (r: the launch), every operand, scale and output inside its buffer.
Gemm parse_gemm(const Reader& r, const std::string& path, const std::string& file, const BufferRefs& refs, int64_t tp_size);

}  // namespace tec::plan
