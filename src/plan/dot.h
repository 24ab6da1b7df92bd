// A Graphviz picture of a plan's steps (te-compile --dot, te-run --dot): fused groups as
// clusters, edges labelled with each tensor's shape, dtype, quantizer and bytes. People
// look at this rather than read the manifest.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tec::plan {

// `manifest` must have passed Plan::load's validation (or come from the compiler).
std::string plan_to_dot(const nlohmann::json& manifest, size_t profile);

}  // namespace tec::plan
