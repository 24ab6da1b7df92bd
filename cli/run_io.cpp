#include "run_io.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>

#include "core/file_io.h"
#include "core/json_text.h"
#include "core/npy.h"
#include "reference/executor.h"

namespace tec::cli {

namespace {

std::string id_text(float id) {
  if (std::isfinite(id) && id == std::trunc(id) && std::fabs(id) < 1e15f) return std::to_string(static_cast<long long>(id));
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(id));
  return text;
}

// A padding mask's rows must be ones then zeros (right-padded): tec's attention takes each
// sequence's length.
void check_padding_mask(const std::string& input, const NpyArray& mask, const std::string& node) {
  const int64_t seq = mask.shape.cols(), rows = seq > 0 ? static_cast<int64_t>(mask.values.size()) / seq : 0;
  for (int64_t b = 0; b < rows; ++b) {
    const float* row = &mask.values[static_cast<size_t>(b * seq)];
    int64_t length = 0;
    while (length < seq && row[length] == 1.0f) ++length;
    for (int64_t j = length; j < seq; ++j)
      if (row[j] != 0.0f)
        throw Error(ErrorKind::invalid_input, ErrorContext{"te-run", input, "", "--input " + input},
                    "input '" + input + "' (a padding mask, read by sequence_lengths '" + node + "') holds " + id_text(row[j]) + " at [" + std::to_string(b) +
                        ", " + std::to_string(j) + "] after " + std::to_string(length) +
                        " leading ones; tec's attention takes right-padded sequences: each row ones (tokens), then zeros (padding)");
  }
}

// Integer inputs, checked before any step runs: token ids outside an embedding's table, named
// with their index (the reference would stop at the embedding, the GPU zero the row and set its
// status word), and padding masks that are not right-padded.
void check_integer_input(const plan::Profile& profile, const std::string& input, const NpyArray& ids) {
  for (const plan::Op* op : reference::integer_input_readers(profile, input)) {
    if (op->op == "sequence_lengths") {
      check_padding_mask(input, ids, op->node);
      continue;
    }
    const int64_t rows = op->attrs.get_int("num_embeddings", 0);
    for (size_t i = 0; i < ids.values.size(); ++i) {
      const float id = ids.values[i];
      if (id >= 0.0f && id < static_cast<float>(rows)) continue;
      std::string at;
      for (size_t d = ids.shape.rank(), rest = i; d-- > 0; rest /= static_cast<size_t>(ids.shape.dims[d]))
        at = std::to_string(rest % static_cast<size_t>(ids.shape.dims[d])) + (at.empty() ? "" : ", ") + at;
      throw Error(ErrorKind::invalid_input, ErrorContext{"te-run", input, "", "--input " + input},
                  "input '" + input + "' holds token id " + id_text(id) + " at [" + at + "], outside the table of embedding '" +
                      op->node + "' (" + std::to_string(rows) + " rows: ids must be in [0, " + std::to_string(rows) + "))");
    }
  }
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
