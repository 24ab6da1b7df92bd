#include "run_io.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/file_io.h"
#include "core/json_text.h"
#include "core/npy.h"
#include "ops/common.h"
#include "reference/executor.h"

namespace tec::cli {

namespace {

// Integer inputs, checked before any step runs by what reads them (OpDef::index_input): token ids
// outside an embedding's table, named with their index (the reference would stop at the
// embedding, the GPU zero the row and set its status word); padding masks not right-padded.
void check_integer_input(const plan::Profile& profile, const std::string& input, const NpyArray& values) {
  const HostTensor as_read{values.shape, values.values};
  for (const plan::Op* op : reference::integer_input_readers(profile, input))
    builtin_ops().get(op->op).index_input->check(op->attrs, input, op->node, as_read);
}

}  // namespace

std::vector<NamedTensor> read_inputs(const plan::Plan& plan, const plan::Profile& profile,
                                     const std::vector<std::pair<std::string, std::string>>& assignments) {
  std::vector<NamedTensor> out;
  std::set<std::string> given;
  for (const auto& [name, file] : assignments) {
    const ErrorContext ctx{"te-run", name, "", "--input " + name + "=" + file};
    if (std::find(profile.inputs.begin(), profile.inputs.end(), name) == profile.inputs.end()) {
      std::string inputs;
      for (const auto& input : profile.inputs) inputs += (inputs.empty() ? "" : ", ") + input;
      throw Error(ErrorKind::usage, ctx, "the plan has no input '" + name + "'; its inputs are: " + inputs);
    }
    if (!given.insert(name).second) throw Error(ErrorKind::usage, ctx, "input '" + name + "' is given twice");
    const plan::Tensor& input = profile.tensors.at(name);
    const Shape shape = reference::whole_shape(plan, profile, name);
    const bool integer_input = input.proto.dtype == DType::int32;
    // The file may hold no more than the input's values in the widest dtype .npy takes.
    NpyArray array = read_npy(file, static_cast<uint64_t>(checked_mul(shape.numel(), 8)));
    TEC_USER_CHECK(array.shape == shape, ctx) << "input '" << name << "' has shape " << shape.str() << ", the file holds "
                                              << array.shape.str();
    TEC_USER_CHECK(array.integer == integer_input, ctx)
        << "input '" << name << "' is " << to_string(input.proto.dtype) << ", the file holds " << array.dtype << " values; give "
        << (integer_input ? "int32 or int64 values (token ids, expert indices, m_splits)" : "float16, float32 or float64 values");
    if (integer_input) check_integer_input(profile, name, array);
    out.emplace_back(name, HostTensor{std::move(array.shape), std::move(array.values)});
  }
  return out;
}

void save_outputs(const std::string& dir, const std::vector<NamedTensor>& tensors) {
  std::vector<std::string> files;
  std::set<std::string> taken;
  for (const NamedTensor& named : tensors) {
    const std::string& name = named.first;
    files.push_back(with_context(ErrorContext{"te-run", name, "", "--save-outputs"}, [&] { return file_name_for(name, ".npy"); }));
    TEC_INTERNAL_CHECK(taken.insert(files.back()).second, {}) << "two outputs map to the file name " << files.back();
  }
  create_output_folder(dir, "--save-outputs");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, tensor] = tensors[i];
    write_npy((std::filesystem::path(dir) / files[i]).string(), tensor.shape, tensor.values);
    if (files[i] != name + ".npy")
      std::printf("  output %s saved as %s (characters a file name cannot hold are %%XX)\n", json_excerpt(nlohmann::json(name)).c_str(),
                  files[i].c_str());
  }
  std::printf("saved outputs to %s\n", dir.c_str());
}

}  // namespace tec::cli
