#include "ops/general.h"

#include <algorithm>
#include <limits>

#include "core/parallel.h"
#include "ops/common.h"
#include "tec_math.h"

namespace tec {

std::vector<int64_t> broadcast_strides(const Shape& operand, const Shape& out) {
  const std::vector<int64_t> own = operand.contiguous_strides();
  std::vector<int64_t> strides(out.rank(), 0);
  const size_t skipped = out.rank() - operand.rank();
  for (size_t d = skipped; d < out.rank(); ++d)
    if (operand.dims[d - skipped] != 1) strides[d] = own[d - skipped];
  return strides;
}

void merge_dims(std::vector<int64_t>& dims, const std::vector<std::vector<int64_t>*>& strides, const char* what) {
  std::vector<int64_t> kept_dims;
  std::vector<std::vector<int64_t>> kept(strides.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool joins = !kept_dims.empty();
    for (size_t s = 0; s < strides.size() && joins; ++s) {
      int64_t walked = 0;  // (a hostile stride must not overflow: then the dims stay apart)
      joins = !__builtin_mul_overflow((*strides[s])[d], dims[d], &walked) && kept[s].back() == walked;
    }
    if (joins) {
      kept_dims.back() *= dims[d];
      for (size_t s = 0; s < strides.size(); ++s) kept[s].back() = (*strides[s])[d];
      continue;
    }
    kept_dims.push_back(dims[d]);
    for (size_t s = 0; s < strides.size(); ++s) kept[s].push_back((*strides[s])[d]);
  }
  TEC_UNSUPPORTED_CHECK(kept_dims.size() <= kGeneralMaxRank, {})
      << what << " walks " << kept_dims.size() << " dims that do not merge; the general kernels take at most " << kGeneralMaxRank;
  dims = std::move(kept_dims);
  for (size_t s = 0; s < strides.size(); ++s) *strides[s] = std::move(kept[s]);
}

GeneralPlan map_plan(int code, const std::vector<Shape>& inputs) {
  Shape out = inputs.at(0);
  for (size_t i = 1; i < inputs.size(); ++i) out = broadcast_shape_checked(out, inputs[i], {});
  GeneralPlan p;
  p.kernel = GeneralKernel::map;
  p.code = code;
  p.out_dims = out.dims;
  p.dims = out.dims;
  for (const Shape& s : inputs) p.strides.push_back(broadcast_strides(s, out));
  std::vector<std::vector<int64_t>*> lists;
  for (auto& s : p.strides) lists.push_back(&s);
  merge_dims(p.dims, lists, "an elementwise op");
  return p;
}

namespace {

// The offset of row-major index `index` over `dims` through `strides`.
int64_t offset_of(int64_t index, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (size_t d = dims.size(); d-- > 0;) {
    offset += index % dims[d] * strides[d];
    index /= dims[d];
  }
  return offset;
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

constexpr int64_t kChunk = 4096;  // elements per parallel_for item

void run_map(const GeneralPlan& p, const std::vector<HostTensor>& in, std::vector<float>& out) {
  const auto n = static_cast<int64_t>(out.size());
  parallel_for((n + kChunk - 1) / kChunk, [&](int64_t chunk) {
    for (int64_t e = chunk * kChunk; e < std::min(n, (chunk + 1) * kChunk); ++e) {
      float v[3] = {0.0f, 0.0f, 0.0f};
      for (size_t i = 0; i < in.size(); ++i) v[i] = in[i].values[static_cast<size_t>(offset_of(e, p.dims, p.strides[i]))];
      out[static_cast<size_t>(e)] = tec_apply_map(p.code, v[0], v[1], v[2]);
    }
  });
}

void run_copies(const GeneralPlan& p, const std::vector<HostTensor>& in, std::vector<float>& out) {
  for (const StridedCopy& c : p.copies) {
    const int64_t n = product(c.dims);
    const std::vector<float>* src = c.input == kZeroFill ? nullptr : &in.at(static_cast<size_t>(c.input)).values;
    parallel_for((n + kChunk - 1) / kChunk, [&](int64_t chunk) {
      for (int64_t e = chunk * kChunk; e < std::min(n, (chunk + 1) * kChunk); ++e)
        out[static_cast<size_t>(c.out_offset + offset_of(e, c.dims, c.out_strides))] =
            src ? (*src)[static_cast<size_t>(c.in_offset + offset_of(e, c.dims, c.in_strides))] : 0.0f;
    });
  }
}

void run_softmax(const GeneralPlan& p, const std::vector<float>& x, std::vector<float>& out) {
  parallel_for(p.rows, [&](int64_t r) {
    const int64_t base = r / p.inner * p.n * p.inner + r % p.inner;
    auto at = [&](long long j) { return static_cast<size_t>(base + j * p.inner); };
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < p.n; ++j) max = tec_max_nan(x[at(j)], max);
    const float sum = tec_row_sum_order(p.n, [&](long long j) { return tec_exp(x[at(j)] - max); });
    for (int64_t j = 0; j < p.n; ++j) out[at(j)] = tec_exp(x[at(j)] - max) / sum;
  });
}

void run_reduce(const GeneralPlan& p, const std::vector<float>& x, std::vector<float>& out) {
  const int64_t count = product(p.reduced_dims);
  parallel_for(static_cast<int64_t>(out.size()), [&](int64_t o) {
    const int64_t base = offset_of(o, p.dims, p.strides.at(0));
    auto get = [&](long long i) { return x[static_cast<size_t>(base + offset_of(i, p.reduced_dims, p.reduced_strides))]; };
    float r;
    if (p.code == TEC_REDUCE_MAX) {
      r = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < count; ++i) r = tec_max_nan(get(i), r);
    } else {
      r = tec_row_sum_order(count, get);
      if (p.code == TEC_REDUCE_MEAN) r = r / static_cast<float>(count);
    }
    out[static_cast<size_t>(o)] = r;
  });
}

void run_matmul(const GeneralPlan& p, const std::vector<HostTensor>& in, std::vector<float>& out) {
  const int64_t batches = product(p.dims);
  const std::vector<float>&a = in.at(0).values, &b = in.at(1).values;
  parallel_for(batches * p.m, [&](int64_t item) {
    const int64_t batch = item / p.m, row = item % p.m;
    const int64_t a0 = offset_of(batch, p.dims, p.strides.at(0)) + row * p.k, b0 = offset_of(batch, p.dims, p.strides.at(1));
    float* y = &out[static_cast<size_t>((batch * p.m + row) * p.n)];
    for (int64_t c = 0; c < p.n; ++c) {
      float acc = 0.0f;  // k in order, no fused multiply-add: kernels/general.cu's bits
      for (int64_t i = 0; i < p.k; ++i) acc += a[static_cast<size_t>(a0 + i)] * b[static_cast<size_t>(b0 + i * p.n + c)];
      y[c] = acc;
    }
  });
}

// The flat index into D_1 .. D_k that tuple j picks; -1 when it is out of range.
int64_t picked(const GeneralPlan& p, const std::vector<float>& indices, int64_t j) {
  int64_t flat = 0;
  for (size_t t = 0; t < p.dims.size(); ++t) {
    const int64_t extent = p.dims[t];
    auto index = static_cast<int64_t>(indices[static_cast<size_t>(j * p.k + static_cast<int64_t>(t))]);
    if (index < -extent || index >= extent) return -1;
    flat = flat * extent + (index < 0 ? index + extent : index);
  }
  return flat;
}

// Throws naming the first entry of index tuple j outside the axis it picks from.
[[noreturn]] void bad_index(const GeneralPlan& p, const std::vector<float>& indices, int64_t j) {
  for (size_t t = 0; t < p.dims.size(); ++t) {
    const int64_t extent = p.dims[t], at = j * p.k + static_cast<int64_t>(t);
    const auto index = static_cast<int64_t>(indices[static_cast<size_t>(at)]);
    TEC_USER_CHECK(index >= -extent && index < extent, {})
        << "index " << index << " at position " << at << " of the indices is outside [" << -extent << ", " << extent
        << ") of the axis it picks from";
  }
  TEC_INTERNAL_ERROR({}) << "index tuple " << j << " was out of range, but no entry of it is";
}

void run_gather(const GeneralPlan& p, const std::vector<HostTensor>& in, std::vector<float>& out) {
  const std::vector<float>&data = in.at(0).values, &indices = in.at(1).values;
  const int64_t block = product(p.dims), rows = p.m * p.n;
  parallel_for(rows, [&](int64_t row) {  // (o, j): one index tuple's inner row
    const int64_t o = row / p.n, j = row % p.n;
    const int64_t flat = picked(p, indices, j);
    if (flat < 0) bad_index(p, indices, j);
    std::copy_n(&data[static_cast<size_t>((o * block + flat) * p.inner)], p.inner, &out[static_cast<size_t>(row * p.inner)]);
  });
}

void run_scatter_add(const GeneralPlan& p, const std::vector<HostTensor>& in, std::vector<float>& out) {
  const std::vector<float>&g = in.at(0).values, &indices = in.at(1).values;
  const int64_t block = product(p.dims);
  std::vector<int64_t> pick(static_cast<size_t>(p.n));
  for (int64_t j = 0; j < p.n; ++j) pick[static_cast<size_t>(j)] = picked(p, indices, j);
  parallel_for(p.m * block, [&](int64_t row) {  // (o, d): one output row, its tuples in order (kernels/general.cu)
    const int64_t o = row / block, d = row % block;
    float* y = &out[static_cast<size_t>(row * p.inner)];
    for (int64_t j = 0; j < p.n; ++j) {
      if (pick[static_cast<size_t>(j)] != d) continue;
      const float* x = &g[static_cast<size_t>((o * p.n + j) * p.inner)];
      for (int64_t i = 0; i < p.inner; ++i) y[i] = y[i] + x[i];
    }
  });
}

}  // namespace

HostTensor run_general(const GeneralPlan& plan, const std::vector<HostTensor>& inputs) {
  const Shape out_shape(plan.out_dims);
  HostTensor out{out_shape, std::vector<float>(static_cast<size_t>(out_shape.numel()), 0.0f)};
  switch (plan.kernel) {
    case GeneralKernel::map: run_map(plan, inputs, out.values); break;
    case GeneralKernel::copies: run_copies(plan, inputs, out.values); break;
    case GeneralKernel::softmax: run_softmax(plan, inputs.at(0).values, out.values); break;
    case GeneralKernel::reduce: run_reduce(plan, inputs.at(0).values, out.values); break;
    case GeneralKernel::matmul: run_matmul(plan, inputs, out.values); break;
    case GeneralKernel::gather: run_gather(plan, inputs, out.values); break;
    case GeneralKernel::scatter_add: run_scatter_add(plan, inputs, out.values); break;
  }
  return out;
}

std::function<InferResult(const InferContext&)> general_infer(GeneralFn general, std::function<DType(const InferContext&)> dtype) {
  return [general = std::move(general), dtype = std::move(dtype)](const InferContext& ctx) {
    std::vector<Shape> shapes;
    for (const TensorProto& p : ctx.inputs) shapes.push_back(p.shape);
    const GeneralPlan plan = with_context(ctx.error, [&] {
      GeneralPlan p = general(ctx.node.attrs, shapes);
      // An output shape from attributes (expand's) is as hostile as the model: each dim at least
      // 1, the whole within kMaxElements (Shape::numel checks), before anything sizes by it.
      for (int64_t d : p.out_dims) TEC_USER_CHECK(d >= 1 && d <= kMaxDim, {}) << "the output's dim " << d << " is not in [1, " << kMaxDim << "]";
      (void)Shape(p.out_dims).numel();
      return p;
    });
    return InferResult{{TensorProto::dense(Shape(plan.out_dims), dtype(ctx))}, {}, {}};
  };
}

std::function<std::vector<HostTensor>(const Attributes&, const std::vector<HostTensor>&)> general_reference(GeneralFn general) {
  return [general = std::move(general)](const Attributes& attrs, const std::vector<HostTensor>& in) {
    std::vector<Shape> shapes;
    for (const HostTensor& t : in) shapes.push_back(t.shape);
    return std::vector<HostTensor>{run_general(general(attrs, shapes), in)};
  };
}

}  // namespace tec
