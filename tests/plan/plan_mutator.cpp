// A structured plan mutator (issue 51): rewrites one manifest field at a time, recomputes the
// checksum, and loads and runs the result on the CPU reference, as te-run --inspect and
// te-run --backend cpu would. Each mutant must be refused with a tec error that is not
// internal (exit 70), or run to the unmutated plan's outputs bit for bit, or have changed a
// field whose meaning is the result (an op's epsilon, a quantizer's margin: kSemanticFields).
// A crash fails the run by itself; CI runs it under AddressSanitizer too.
//
//   plan_mutator PLAN [PLAN...] [--seconds S] [--seed N]   mutate, time-bounded per plan
//   plan_mutator --set IN OUT POINTER JSON                  write IN with one field set (for tests)
#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "plan/file.h"
#include "plan/format.h"
#include "plan/plan.h"
#include "reference/executor.h"

namespace {

using json = nlohmann::json;
using namespace tec;

// Fields whose value is part of what the plan computes, so that another valid value gives
// another valid result: op attributes and the quantizers' numeric settings. Every other field
// (offsets, sizes, indices, shapes, dtypes, regions, lifetimes, names, launches, GEMMs) must
// not change a result without an error.
const std::regex kSemanticFields(
    R"(^/profiles/\d+/steps/\d+/ops/\d+/(op$|attrs$|attrs/.*)|^/profiles/\d+/tensors/\d+/quantizer/(margin|amax_epsilon|amax_algo|force_pow2_scales|static_scale_inv(/\d+)?)$)");

// Fields only the GPU runtime reads: the CPU reference never sees them, so an accepted
// mutation there leaves its outputs alone. They are counted apart in the summary.
const std::regex kGpuFields(R"(^/profiles/\d+/gpu/.*|^/modules/.*)");

struct Outputs {
  std::vector<std::pair<std::string, std::vector<uint32_t>>> tensors;  // bits, so NaN == NaN
  bool operator==(const Outputs&) const = default;
};

std::vector<uint32_t> bits_of(const HostTensor& t) {
  std::vector<uint32_t> out(t.values.size());
  std::memcpy(out.data(), t.values.data(), out.size() * 4);
  return out;
}

// Runs every profile small enough once on the reference, from seed-1 inputs.
Outputs run(const plan::Plan& plan) {
  Outputs out;
  for (const plan::Profile& profile : plan.profiles) {
    if (plan.arena_bytes > (int64_t{64} << 20)) continue;
    reference::RankGroup group(plan, profile);
    group.randomize_inputs(1);
    group.run();
    for (const std::string& name : profile.outputs) {
      if (plan.tp_size == 1 || profile.tp_layouts.count(name)) {
        out.tensors.emplace_back(name, bits_of(group.read(name)));
      } else {
        for (int64_t r = 0; r < group.size(); ++r) out.tensors.emplace_back(name, bits_of(group.rank(r).read(name)));
      }
    }
  }
  return out;
}

struct Leaf {
  std::string pointer;
  json value;
  std::string key;  // the last path element
};

std::string escape(std::string key) {  // RFC 6901
  for (size_t i = 0; (i = key.find('~', i)) != std::string::npos; i += 2) key.replace(i, 1, "~0");
  for (size_t i = 0; (i = key.find('/', i)) != std::string::npos; i += 2) key.replace(i, 1, "~1");
  return key;
}

void collect(const json& j, const std::string& pointer, std::vector<Leaf>& leaves) {
  const std::string key = pointer.substr(pointer.rfind('/') + 1);
  leaves.push_back({pointer, j.is_structured() ? json() : j, key});
  if (j.is_structured() && !j.is_object()) leaves.back().value = json::array();  // marks an array
  if (j.is_object()) {
    leaves.back().value = json::object();
    for (auto it = j.begin(); it != j.end(); ++it) collect(*it, pointer + "/" + escape(it.key()), leaves);
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) collect(j[i], pointer + "/" + std::to_string(i), leaves);
  }
}

struct Mutation {
  std::string pointer;
  std::string what;
  std::function<void(json&)> apply;
};

// The mutations of one field: neighbours and extremes of a number, a flipped boolean, other
// values the same key takes elsewhere in the manifest, a dropped key or array element, and a
// value of another type.
std::vector<Mutation> mutations_of(const Leaf& leaf, const std::map<std::string, std::vector<json>>& values_by_key) {
  std::vector<Mutation> out;
  const json::json_pointer at(leaf.pointer.empty() ? "" : leaf.pointer);
  auto set = [&](const json& v, const std::string& what) {
    out.push_back({leaf.pointer, what + " " + v.dump().substr(0, 60), [at, v](json& m) { m[at] = v; }});
  };
  const json& v = leaf.value;
  if (leaf.pointer.empty()) return out;
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    for (int64_t d : {int64_t{1}, int64_t{-1}, int64_t{256}, int64_t{-256}, int64_t{4096}}) set(n + d, "add " + std::to_string(d) + ":");
    for (int64_t x : {int64_t{0}, int64_t{-1}, int64_t{2} * n, n / 2, int64_t{1} << 31, int64_t{1} << 40, INT64_MAX}) set(x, "set");
  } else if (v.is_number()) {
    for (double x : {0.0, -v.get<double>(), 2 * v.get<double>(), 1e308, -1e-300}) set(x, "set");
  } else if (v.is_boolean()) {
    set(!v.get<bool>(), "flip");
  } else if (v.is_string()) {
    set("", "set");
    set(v.get<std::string>() + "x", "set");
    set("../../etc/passwd", "set");
  } else if (v.is_null()) {
    set(0, "set");
    set(1, "set");
  } else if (v.is_array()) {
    out.push_back({leaf.pointer, "drop the last element", [at](json& m) {
                     if (!m[at].empty()) m[at].erase(m[at].size() - 1);
                   }});
    out.push_back({leaf.pointer, "repeat the first element", [at](json& m) {
                     if (!m[at].empty()) m[at].push_back(m[at][0]);
                   }});
    set(json::array(), "set");
  } else if (v.is_object()) {
    out.push_back({leaf.pointer, "drop the first key", [at](json& m) {
                     if (!m[at].empty()) m[at].erase(m[at].begin());
                   }});
  }
  if (!v.is_structured()) {
    set(v.is_string() ? json(7) : json("7"), "retype:");
    // Values this key takes elsewhere: another buffer's index, another region, another tensor.
    if (auto it = values_by_key.find(leaf.key); it != values_by_key.end())
      for (size_t i = 0; i < it->second.size() && i < 4; ++i)
        if (it->second[i] != v) set(it->second[i], "swap:");
  }
  return out;
}

struct Verdict {
  int refused = 0, same = 0, semantic = 0, gpu_only = 0, failures = 0;
};

std::string kind_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const Error*>(&e)) return to_string(error->kind());
  return "std::exception";
}

bool mutate_plan(const std::string& path, double seconds, uint64_t seed) {
  const std::vector<uint8_t> bytes = plan::read_plan_file(path);
  const plan::PlanFile file = plan::parse_plan_file(bytes, path);
  const std::vector<uint8_t> blobs(file.blobs.begin(), file.blobs.end());
  const Outputs baseline = run(plan::Plan::load(bytes, path));
  std::vector<Leaf> leaves;
  collect(file.manifest, "", leaves);
  std::map<std::string, std::vector<json>> values_by_key;
  for (const Leaf& l : leaves)
    if (!l.value.is_structured()) {
      auto& seen = values_by_key[l.key];
      if (std::find(seen.begin(), seen.end(), l.value) == seen.end() && seen.size() < 8) seen.push_back(l.value);
    }
  std::vector<Mutation> all;
  for (const Leaf& l : leaves)
    for (Mutation& m : mutations_of(l, values_by_key)) all.push_back(std::move(m));
  std::shuffle(all.begin(), all.end(), std::mt19937_64(seed));

  Verdict v;
  size_t done = 0;
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, int> gpu_accepted;  // GPU field -> accepted mutations
  for (const Mutation& m : all) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) break;
    ++done;
    json manifest = file.manifest;
    m.apply(manifest);
    const std::vector<uint8_t> mutant = plan::assemble_plan(manifest.dump(), blobs);
    auto fail = [&](const std::string& why) {
      ++v.failures;
      std::printf("FAIL %s %s (%s): %s\n", path.c_str(), m.pointer.c_str(), m.what.c_str(), why.c_str());
    };
    try {
      const plan::Plan plan = plan::Plan::load(mutant, "mutant.teplan");
      const Outputs outputs = run(plan);
      if (outputs == baseline) {
        ++(std::regex_match(m.pointer, kGpuFields) ? v.gpu_only : v.same);
        if (std::regex_match(m.pointer, kGpuFields)) ++gpu_accepted[std::regex_replace(m.pointer, std::regex(R"(/\d+)"), "/*")];
      } else if (std::regex_match(m.pointer, kSemanticFields)) {
        ++v.semantic;
      } else {
        fail("loaded and ran to other outputs without an error");
      }
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::internal) fail(std::string("internal error: ") + e.what());
      else ++v.refused;
    } catch (const std::bad_alloc&) {
      fail("std::bad_alloc: a size reached an allocation unchecked");
    } catch (const std::exception& e) {
      fail(kind_of(e) + ": " + e.what());
    }
  }
  std::printf("%s: %zu of %zu mutations in %.0f s: %d refused with an error, %d ran to the same outputs, %d GPU-only fields "
              "accepted, %d changed a semantic field's result, %d failures\n",
              path.c_str(), done, all.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), v.refused, v.same, v.gpu_only,
              v.semantic, v.failures);
  for (const auto& [field, count] : gpu_accepted) std::printf("  accepted GPU field %s: %d\n", field.c_str(), count);
  return v.failures == 0;
}

int set_field(const std::string& in, const std::string& out, const std::string& pointer, const std::string& value) {
  const std::vector<uint8_t> bytes = plan::read_plan_file(in);
  const plan::PlanFile file = plan::parse_plan_file(bytes, in);
  json manifest = file.manifest;
  manifest[json::json_pointer(pointer)] = json::parse(value);
  write_file_atomically(out, plan::assemble_plan(manifest.dump(), file.blobs));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 5 && args[0] == "--set") return set_field(args[1], args[2], args[3], args[4]);
    double seconds = 30;
    uint64_t seed = 1;
    std::vector<std::string> plans;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--seconds" && i + 1 < args.size()) seconds = std::stod(args[++i]);
      else if (args[i] == "--seed" && i + 1 < args.size()) seed = std::stoull(args[++i]);
      else plans.push_back(args[i]);
    }
    if (plans.empty()) {
      std::fprintf(stderr, "usage: plan_mutator PLAN... [--seconds S] [--seed N] | --set IN OUT POINTER JSON\n");
      return 2;
    }
    bool ok = true;
    for (const auto& p : plans) ok = mutate_plan(p, seconds, seed) && ok;
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_mutator: %s\n", e.what());
    return 2;
  }
}
