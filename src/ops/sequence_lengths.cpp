// sequence_lengths: each sequence's length from a padding mask [B, S] of 1 (token) and 0
// (padding), as Hugging Face's models take `attention_mask`; attention's seq_lens (its padding
// mask, cuDNN's sequence lengths). The sequences must be right-padded (ones, then zeros): the
// reference stops with an error naming the row otherwise; the GPU kernel
// (kernels/attention_stats.cu) sets the status word's TEC_STATUS_BAD_PADDING, reported when
// results are read, and gives the row's leading ones.
#include "ops/common.h"

namespace tec {

namespace {

InferResult infer_sequence_lengths(const InferContext& ctx) {
  const TensorProto& mask = ctx.inputs.at(0);
  const std::string& name = ctx.graph.value(ctx.node.inputs.at(0)).name;
  TEC_USER_CHECK(mask.dtype == DType::int32 && !mask.is_quantized(), ctx.error)
      << "input '" << name << "' (the padding mask) must be int32, got " << to_string(mask.dtype);
  TEC_USER_CHECK(mask.shape.rank() == 2, ctx.error) << "input '" << name << "' (the padding mask) is " << mask.shape.str()
                                                    << "; it takes [batch, seq]";
  return InferResult{{TensorProto::dense(Shape{mask.shape[0]}, DType::int32)}, {}, {}};
}

std::vector<HostTensor> reference_sequence_lengths(const Attributes&, const std::vector<HostTensor>& in) {
  const HostTensor& mask = in.at(0);
  const int64_t batch = mask.shape[0], seq = mask.shape[1];
  HostTensor lengths{Shape{batch}, std::vector<float>(static_cast<size_t>(batch))};
  for (int64_t b = 0; b < batch; ++b) {
    const float* row = &mask.values[static_cast<size_t>(b * seq)];
    int64_t length = 0;
    while (length < seq && row[length] == 1.0f) ++length;
    for (int64_t j = length; j < seq; ++j)
      TEC_USER_CHECK(row[j] == 0.0f, {}) << "padding mask row " << b << " holds " << row[j] << " at " << j << " after " << length
                                         << " leading ones; tec's attention takes right-padded sequences (ones, then zeros)";
    lengths.values[static_cast<size_t>(b)] = static_cast<float>(length);
  }
  return {std::move(lengths)};
}

// A padding mask given from outside: each row ones, then zeros.
void check_padding_mask(const Attributes&, const std::string& input, const std::string& node, const HostTensor& mask) {
  const int64_t seq = mask.shape.cols(), rows = seq > 0 ? static_cast<int64_t>(mask.values.size()) / seq : 0;
  for (int64_t b = 0; b < rows; ++b) {
    const float* row = &mask.values[static_cast<size_t>(b * seq)];
    int64_t length = 0;
    while (length < seq && row[length] == 1.0f) ++length;
    for (int64_t j = length; j < seq; ++j)
      if (row[j] != 0.0f)
        throw Error(ErrorKind::invalid_input, ErrorContext{"te-run", input, "", "--input " + input},
                    "input '" + input + "' (a padding mask, read by sequence_lengths '" + node + "') holds " + value_text(row[j]) +
                        " at [" + std::to_string(b) + ", " + std::to_string(j) + "] after " + std::to_string(length) +
                        " leading ones; tec's attention takes right-padded sequences: each row ones (tokens), then zeros (padding)");
  }
}

}  // namespace

void register_sequence_lengths_ops(OpRegistry& registry) {
  registry.add(OpDef{
      .name = "sequence_lengths",
      .summary = "each sequence's length from a right-padded int32 padding mask [B, S] of 1 and 0 (attention's seq_lens; inference)",
      .infer = infer_sequence_lengths,
      .reference = reference_sequence_lengths,
      .index_input = IndexInput{.check = check_padding_mask, .draw = [](const Attributes&, double) { return 1.0f; }},  // whole sequences
  });
}

}  // namespace tec
