#include "plan/dot.h"

#include <map>
#include <sstream>

namespace tec::plan {

using json = nlohmann::json;

std::string plan_to_dot(const json& manifest, size_t profile_index) {
  const json& p = manifest.at("profiles").at(profile_index);
  std::map<std::string, std::string> producer;  // tensor -> step node id
  std::ostringstream out;
  out.exceptions(std::ios::badbit);  // out of memory throws rather than truncating the picture
  out << "digraph \"" << manifest.value("name", "plan") << "\" {\n  rankdir=TB;\n  node [shape=box, fontname=Helvetica];\n";
  const json& steps = p.at("steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& s = steps[i];
    out << "  subgraph cluster_" << i << " {\n    label=\"step " << i << ": " << s.at("name").get<std::string>() << " ("
        << s.at("kind").get<std::string>() << ")\";\n    style=rounded; color=" << (s.at("kind") == "gemm" ? "blue" : s.at("kind") == "collective" ? "darkgreen" : "gray")
        << ";\n";
    for (const json& op : s.at("ops")) {
      const std::string id = "op_" + op.at("node").get<std::string>();
      out << "    \"" << id << "\" [label=\"" << op.at("node").get<std::string>() << "\\n" << op.at("op").get<std::string>()
          << "\"];\n";
      for (const json& o : op.at("outputs")) producer[o.get<std::string>()] = id;
    }
    out << "  }\n";
  }
  std::map<std::string, const json*> tensors;
  for (const json& t : p.at("tensors")) tensors[t.at("name").get<std::string>()] = &t;
  for (const json& name : p.at("inputs")) producer[name.get<std::string>()] = "in_" + name.get<std::string>();
  for (const json& name : p.at("inputs")) out << "  \"in_" << name.get<std::string>() << "\" [shape=ellipse, label=\"" << name.get<std::string>() << "\"];\n";
  auto edge_label = [&](const std::string& tensor) {
    const json& t = *tensors.at(tensor);
    // Quantized tensors show their stored format, not the nominal dtype.
    std::string label = tensor + "\\n" + t.at("shape").dump() + " " +
                        (t.at("quantizer").is_null() ? t.at("dtype").get<std::string>() : t.at("quantizer").at("str").get<std::string>());
    int64_t bytes = 0;
    for (const auto& [role, index] : t.at("buffers").items()) bytes += p.at("buffers").at(index.get<size_t>()).at("bytes").get<int64_t>();
    return label + (t.at("buffers").empty() ? "\\n(in registers)" : "\\n" + std::to_string(bytes) + " B");
  };
  for (const json& s : steps)
    for (const json& op : s.at("ops"))
      for (const json& in : op.at("inputs")) {
        const std::string name = in.get<std::string>();
        if (!producer.count(name)) continue;  // weights: constants, not drawn
        out << "  \"" << producer[name] << "\" -> \"op_" << op.at("node").get<std::string>() << "\" [label=\""
            << edge_label(name) << "\", fontsize=9];\n";
      }
  for (const json& name : p.at("outputs")) {
    out << "  \"out_" << name.get<std::string>() << "\" [shape=ellipse, label=\"" << name.get<std::string>() << "\"];\n";
    out << "  \"" << producer[name.get<std::string>()] << "\" -> \"out_" << name.get<std::string>() << "\" [label=\""
        << edge_label(name.get<std::string>()) << "\", fontsize=9];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace tec::plan
