// Canonical spellings, before the ONNX frontend's patterns look at a graph: exporters write
// one computation in many ways (torch.onnx's dynamo exporter transposes attention's keys
// through a 3-D view, its eager path in one 4-D Transpose), and a pattern should be written
// once, against one of them. Each rewrite here turns a spelling into the one the patterns
// know, keeping what the graph computes bit for bit (only data movement is rewritten), and
// says so for te-compile --report.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "frontend/onnx/onnx_model.h"

namespace tec::onnx {

// Rewrites `nodes` in place (a node keeps its index and name; new nodes are appended with
// fresh, unique names). `outputs` are the graph's outputs, which are never rewritten away.
// The nodes are well formed (the importer's claims checked their arity). Returns, per node
// index it touched, what it did, for the report.
std::map<int, std::string> canonicalize(std::vector<Node>& nodes, const std::map<std::string, Tensor>& initializers,
                                        const std::vector<ValueInfo>& inputs, const std::set<std::string>& outputs);

}  // namespace tec::onnx
