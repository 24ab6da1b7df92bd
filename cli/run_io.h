// te-run's inputs and outputs, for the CPU and GPU backends alike: --input files checked
// against the plan before anything runs, and --save-outputs files kept inside their folder.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/op_registry.h"
#include "plan/plan.h"

namespace tec::cli {

using NamedTensor = std::pair<std::string, HostTensor>;

// Each --input NAME=FILE, read and checked against `profile`: NAME must be one of its inputs
// (the error lists them), given once; the file's shape must be the input's exactly (a
// tensor-parallel plan's whole tensor); an int32 input takes integer files only and the others
// float files only (a float file is rounded to the input's dtype, as te-run --help says).
std::vector<NamedTensor> read_inputs(const plan::Plan& plan, const plan::Profile& profile,
                                     const std::vector<std::pair<std::string, std::string>>& assignments);

// Writes each tensor as DIR/<file_name_for(name)>.npy, creating DIR; every name is checked
// before the first file is written. Says where a name was escaped.
void save_outputs(const std::string& dir, const std::vector<NamedTensor>& tensors);

}  // namespace tec::cli
