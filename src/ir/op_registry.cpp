#include "ir/op_registry.h"

#include <algorithm>
#include <sstream>

namespace tec {

std::string_view to_string(AttrType type) {
  switch (type) {
    case AttrType::int_: return "int";
    case AttrType::float_: return "float";
    case AttrType::bool_: return "bool";
    case AttrType::string_: return "string";
    case AttrType::ints: return "list of ints";
  }
  return "?";
}

void OpRegistry::add(OpDef def) {
  // infer_backward may be missing: such an op (the general tensor math) is inference-only,
  // and the meta pass says so when a gradient would flow through it. A collective's reference
  // runs every rank at once (OpDef::collective) instead of one.
  TEC_INTERNAL_CHECK(def.infer && (def.reference != nullptr) != (def.collective != nullptr), {})
      << "op '" << def.name << "' lacks infer, or has not exactly one of reference and collective";
  TEC_INTERNAL_CHECK(!ops_.count(def.name), {}) << "op '" << def.name << "' registered twice";
  std::string name = def.name;
  ops_.emplace(std::move(name), std::make_unique<OpDef>(std::move(def)));
}

const OpDef* OpRegistry::find(const std::string& name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

const OpDef& OpRegistry::get(const std::string& name) const {
  const OpDef* def = find(name);
  TEC_INTERNAL_CHECK(def != nullptr, {}) << "op '" << name << "' is not registered";
  return *def;
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> out;
  for (const auto& [name, def] : ops_) out.push_back(def.get());
  return out;
}

std::string OpRegistry::names() const {
  std::string out;
  for (const auto& [name, def] : ops_)
    if (!def->compiler_only) out += (out.empty() ? "" : ", ") + name;
  return out;
}

static bool has_type(const AttrValue& value, AttrType type) {
  switch (type) {
    case AttrType::int_: return std::holds_alternative<int64_t>(value);
    case AttrType::float_: return std::holds_alternative<double>(value) || std::holds_alternative<int64_t>(value);
    case AttrType::bool_: return std::holds_alternative<bool>(value);
    case AttrType::string_: return std::holds_alternative<std::string>(value);
    case AttrType::ints: return std::holds_alternative<std::vector<int64_t>>(value);
  }
  return false;
}

void check_and_default_attributes(const OpDef& def, Attributes& attrs, const ErrorContext& ctx) {
  auto at = [&ctx](const std::string& name) {
    ErrorContext c = ctx;
    c.location += "/attrs/" + name;
    return c;
  };
  for (const auto& entry : attrs.values) {
    const std::string& name = entry.first;
    const AttrValue& value = entry.second;
    auto spec = std::find_if(def.attrs.begin(), def.attrs.end(), [&](const AttrSpec& s) { return s.name == name; });
    if (spec == def.attrs.end()) {
      std::string known;
      for (const auto& s : def.attrs) known += (known.empty() ? "" : ", ") + s.name;
      TEC_USER_ERROR(at(name)) << "unknown attribute '" << name << "' for op '" << def.name
                               << "'; it takes: " << (known.empty() ? "no attributes" : known);
    }
    TEC_USER_CHECK(has_type(value, spec->type), at(name))
        << "attribute '" << name << "' must be " << to_string(spec->type);
    if (!spec->choices.empty()) {
      const auto& s = std::get<std::string>(value);
      if (std::find(spec->choices.begin(), spec->choices.end(), s) == spec->choices.end()) {
        std::ostringstream allowed;
        for (size_t i = 0; i < spec->choices.size(); ++i) allowed << (i ? ", " : "") << spec->choices[i];
        TEC_USER_ERROR(at(name)) << "attribute '" << name << "' is '" << s << "', expected one of: " << allowed.str();
      }
    }
  }
  for (const auto& spec : def.attrs) {
    if (attrs.has(spec.name)) continue;
    TEC_USER_CHECK(spec.default_value.has_value(), ctx)
        << "op '" << def.name << "' needs attribute '" << spec.name << "' (" << to_string(spec.type) << ": "
        << spec.doc << ")";
    attrs.values.emplace(spec.name, *spec.default_value);
  }
  if (def.check_attributes) def.check_attributes(attrs, ctx);
}

}  // namespace tec
