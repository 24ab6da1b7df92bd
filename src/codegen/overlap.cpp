// Tensor parallel: collectives overlapped with the GEMMs next to them (lower.h,
// overlap_collectives). Runs on a profile's finished launches, so the step lowerings stay as
// they are and a plan compiled with --tp-overlap off differs only here.
#include <algorithm>
#include <map>

#include "codegen/lower.h"

namespace tec::codegen {

namespace {

std::vector<std::string> buffers_of(const Launch& l) {
  std::vector<std::string> out;
  auto add = [&](const std::string& b) {
    if (!b.empty()) out.push_back(b);
  };
  add(l.buffer);
  if (l.kind == Launch::Kind::collective) {
    add(l.collective.send);
    add(l.collective.recv);
  }
  const GemmLaunch& g = l.gemm;
  if (l.kind == Launch::Kind::gemm)
    for (const std::string* b : {&g.a.buffer, &g.a.scale_inv, &g.b.buffer, &g.b.scale_inv, &g.bias, &g.c, &g.d, &g.d_scale, &g.amax_d}) add(*b);
  for (const LaunchArg& a : l.args)
    if (a.kind == LaunchArg::Kind::buffer) add(a.buffer);
  for (const TensorMapArg& m : l.tensor_maps) add(m.buffer);
  return out;
}

bool references(const Launch& l, const std::string& buffer) {
  const std::vector<std::string> used = buffers_of(l);
  return !buffer.empty() && std::find(used.begin(), used.end(), buffer) != used.end();
}

// The steps during which each buffer is in use on the GPU: a launch's own step, or for work on
// the side stream every step from the fork before it to the join after it, since it runs
// beside them.
std::map<std::string, std::pair<int, int>> buffer_steps(const std::vector<Launch>& launches) {
  std::map<std::string, std::pair<int, int>> steps;
  auto use = [&](const Launch& l, int first, int last) {
    for (const std::string& b : buffers_of(l)) {
      const auto [it, fresh] = steps.try_emplace(b, first, last);
      if (!fresh) it->second = {std::min(it->second.first, first), std::max(it->second.second, last)};
    }
  };
  int fork_step = -1;
  std::vector<std::pair<size_t, int>> beside;  // side-stream launches since the last join, and their fork's step
  for (size_t i = 0; i < launches.size(); ++i) {
    const Launch& l = launches[i];
    if (l.kind == Launch::Kind::fork) fork_step = l.step;
    if (l.kind == Launch::Kind::join) {
      for (const auto& [index, first] : beside) use(launches[index], first, l.step);
      beside.clear();
    }
    if (l.stream == 1) beside.emplace_back(i, fork_step);
    else if (l.step >= 0) use(l, l.step, l.step);
  }
  return steps;
}

// A GEMM whose rows can be computed in blocks: x and D row-major, x's scale per tensor (block
// scales along M are laid out over all of M), no FP8 output (its amax is the whole D's).
bool splittable(const Launch& l, int64_t tp_size, int64_t min_rows) {
  if (l.kind != Launch::Kind::gemm) return false;
  const GemmLaunch& g = l.gemm;
  return g.m % tp_size == 0 && g.m >= min_rows && !g.a.transposed && !g.b.transposed && (g.b.scale_mode == "none" || g.b.scale_mode == "tensor") &&
         storage_bytes(g.d_type) > 1 && g.amax_d.empty() && !g.x_rows.any() && !g.d_rows.any();
}

Launch stream_edge(Launch::Kind kind, int step) {
  Launch l;
  l.kind = kind;
  l.step = step;
  return l;
}

// All-gathers read next by a GEMM: its own rows during the gather, the peers' after.
std::vector<Launch> overlap_gathers(std::vector<Launch> in, int64_t tp, int64_t min_rows) {
  std::vector<Launch> out;
  std::vector<bool> done(in.size(), false);
  for (size_t i = 0; i < in.size(); ++i) {
    if (done[i]) continue;
    Launch& gather = in[i];
    const bool candidate = gather.kind == Launch::Kind::collective && gather.collective.op == "all_gather" && gather.stream == 0;
    size_t j = i + 1;
    while (candidate && j < in.size() && !references(in[j], gather.collective.recv) && !references(in[j], gather.collective.send)) ++j;
    if (!candidate || j == in.size() || !splittable(in[j], tp, min_rows) || in[j].gemm.b.buffer != gather.collective.recv ||
        in[j].gemm.b.type != gather.collective.dtype || in[j].gemm.a.buffer == gather.collective.recv ||
        in[j].gemm.c == gather.collective.recv || in[j].gemm.d == gather.collective.recv) {
      out.push_back(std::move(gather));
      continue;
    }
    out.push_back(stream_edge(Launch::Kind::fork, gather.step));
    gather.stream = 1;
    const std::string local = gather.collective.send;
    out.push_back(std::move(gather));
    for (size_t k = i + 1; k < j; ++k) out.push_back(std::move(in[k]));
    const Launch whole = in[j];
    const int64_t block = whole.gemm.m / tp;
    Launch own = whole;
    own.gemm.m = block;
    own.gemm.b.buffer = local;  // this rank's rows, before they are sent
    own.gemm.d_rows = {0, block, 0};
    out.push_back(std::move(own));
    out.push_back(stream_edge(Launch::Kind::join, whole.step));
    for (int shift = 1; shift < tp; ++shift) {
      Launch peer = whole;
      peer.gemm.m = block;
      peer.gemm.x_rows = peer.gemm.d_rows = {0, block, shift};
      out.push_back(std::move(peer));
    }
    done[j] = true;
    i = j;
  }
  return out;
}

// out[out_offset ...] = a[a_offset ...] + b[b_offset ...] over `count` elements
// (kernels/accumulate.cu), + the bias and the residual of `adds` when the sum takes a row
// kernel's work over.
struct Sum {
  std::string out;
  int64_t out_offset = 0;
  std::string a;
  int64_t a_offset = 0;
  std::string b;
  int64_t b_offset = 0;
};
Launch accumulate(ModuleTable& modules, int step, DType type, int64_t count, const Sum& sum, const RowAdds* adds = nullptr) {
  Launch l;
  l.kind = Launch::Kind::kernel;
  l.step = step;
  std::vector<std::string> defines = {"TEC_COUNT=" + std::to_string(count) + "LL", "TEC_DTYPE=" + std::to_string(kernel_dtype_code(type)),
                                      "TEC_OUT_OFFSET=" + std::to_string(sum.out_offset) + "LL",
                                      "TEC_A_OFFSET=" + std::to_string(sum.a_offset) + "LL",
                                      "TEC_B_OFFSET=" + std::to_string(sum.b_offset) + "LL"};
  l.args = {LaunchArg{LaunchArg::Kind::buffer, sum.out, 0}, LaunchArg{LaunchArg::Kind::buffer, sum.a, 0},
            LaunchArg{LaunchArg::Kind::buffer, sum.b, 0}, LaunchArg{}, LaunchArg{}};
  if (adds) {
    defines.insert(defines.end(), {"TEC_BIAS=1", "TEC_BIAS_DTYPE=" + std::to_string(kernel_dtype_code(adds->bias_type)),
                                   "TEC_COLS=" + std::to_string(adds->cols) + "LL"});
    l.args[3] = LaunchArg{LaunchArg::Kind::buffer, adds->bias, 0};
    if (!adds->residual.empty()) {
      defines.insert(defines.end(), {"TEC_RESIDUAL=1", "TEC_RESIDUAL_DTYPE=" + std::to_string(kernel_dtype_code(adds->residual_type))});
      l.args[4] = LaunchArg{LaunchArg::Kind::buffer, adds->residual, 0};
    }
  }
  l.module = modules.add(KernelRequest{"accumulate.cu", std::move(defines), ""});
  l.entry = "tec_accumulate";
  const int64_t vectors = count * storage_bytes(type) / 16;
  l.grid = {std::min<int64_t>((vectors + 255) / 256, 1024), 1, 1};
  l.block = {256, 1, 1};
  return l;
}

// The row kernel right after a reduce-scatter into `result` of `count` elements, if the ring's
// last sum can do its work: it adds a bias row (and a residual) to `result` alone, in the
// sum's dtype, with whole 16-byte vectors per bias row.
const RowAdds* foldable(const std::vector<Launch>& in, size_t next, const std::string& result, DType type, int64_t count) {
  if (next >= in.size() || !in[next].adds || in[next].stream != 0) return nullptr;
  const RowAdds& adds = *in[next].adds;
  const int64_t lanes = 16 / storage_bytes(type);
  if (adds.input != result || adds.type != type || adds.cols <= 0 || adds.cols % lanes != 0 || count % adds.cols != 0 ||
      kernel_dtype_code(adds.bias_type) < 0 || (!adds.residual.empty() && kernel_dtype_code(adds.residual_type) < 0) ||
      adds.output == result || adds.residual == result)
    return nullptr;
  return &adds;
}

// Reduce-scatters of a GEMM's output, as a ring: rank r computes its blocks of rows in the
// order r - 1, r - 2, ..., r (its own last); each block's partial sum, with what the previous
// rank summed of that block added, goes on to the next rank while the following block
// computes, so every exchange is hidden but for the last block's sum, and each link carries
// data both ways at once. The partial buffer P holds the N blocks: P[0] receives, P[1] and
// P[2] take turns for the blocks in flight; the own block is written into the output, which
// the last exchange's sum completes. Two ranks: one exchange, one sum.
std::vector<Launch> overlap_reductions(std::vector<Launch> in, int64_t tp, int64_t min_rows, ModuleTable& modules, Schedule& schedule) {
  std::vector<Launch> out;
  for (size_t i = 0; i < in.size(); ++i) {
    Launch& scatter = in[i];
    if (scatter.kind != Launch::Kind::collective || scatter.collective.op != "reduce_scatter" || scatter.stream != 0 ||
        scatter.collective.reduce != "sum") {
      out.push_back(std::move(scatter));
      continue;
    }
    const std::string partial = scatter.collective.send, result = scatter.collective.recv;
    const DType type = scatter.collective.dtype;
    const int64_t count = scatter.collective.count;  // elements of a block
    // The GEMM that wrote the partial sums, already in `out`, and nothing else using them since.
    size_t k = out.size();
    while (k > 0 && !references(out[k - 1], partial)) --k;
    if (k == 0 || !splittable(out[k - 1], tp, min_rows) || out[k - 1].gemm.d != partial || !out[k - 1].gemm.c.empty() ||
        out[k - 1].gemm.d_type != type || out[k - 1].gemm.m * out[k - 1].gemm.n != count * tp ||
        kernel_dtype_code(type) < 0 || count * storage_bytes(type) % 16 != 0 ||
        std::any_of(out.begin() + static_cast<std::ptrdiff_t>(k), out.end(), [&](const Launch& l) { return references(l, result); })) {
      out.push_back(std::move(scatter));
      continue;
    }
    const Launch whole = out[k - 1];
    const RowAdds* fold = foldable(in, i + 1, result, type, count);
    const int fold_step = fold ? in[i + 1].step : -1;
    const std::vector<Launch> after(std::make_move_iterator(out.begin() + static_cast<std::ptrdiff_t>(k)), std::make_move_iterator(out.end()));
    out.resize(k - 1);
    const int64_t block = whole.gemm.m / tp;
    auto in_flight = [&](int64_t s) { return 1 + s % 2; };  // P's block for the ring's step s
    for (int64_t s = 0; s < tp; ++s) {
      const bool own = s == tp - 1;
      Launch part = whole;
      part.gemm.m = block;
      part.gemm.x_rows = {0, block, static_cast<int>(tp - s - 1)};  // rows of block (rank - s - 1) mod N
      if (own) {
        part.gemm.d = result;
        part.gemm.d_rows = {};
      } else {
        part.gemm.d_rows = {in_flight(s) * block, 0, 0};
      }
      out.push_back(std::move(part));
      if (own) out.insert(out.end(), after.begin(), after.end());
      if (s > 0) {  // what the previous rank summed of this block, received into P[0]
        out.push_back(stream_edge(Launch::Kind::join, scatter.step));
        if (own && fold)
          out.push_back(accumulate(modules, fold_step, type, count, {fold->output, 0, result, 0, partial, 0}, fold));
        else if (own)
          out.push_back(accumulate(modules, scatter.step, type, count, {result, 0, result, 0, partial, 0}));
        else
          out.push_back(accumulate(modules, scatter.step, type, count, {partial, in_flight(s) * count, partial, in_flight(s) * count, partial, 0}));
      }
      if (!own) {
        out.push_back(stream_edge(Launch::Kind::fork, scatter.step));
        Launch exchange = scatter;
        exchange.stream = 1;
        exchange.collective.op = "ring_exchange";
        exchange.collective.send = exchange.collective.recv = partial;
        exchange.collective.send_offset = in_flight(s) * count;
        exchange.collective.recv_offset = 0;
        out.push_back(std::move(exchange));
      }
    }
    if (fold) {
      Step& step = schedule.steps.at(static_cast<size_t>(fold_step));
      step.fusions.push_back("gpu: its bias" + std::string(fold->residual.empty() ? "" : " and residual") + " added by " +
                             schedule.steps.at(static_cast<size_t>(scatter.step)).name + "'s last ring sum (one pass over '" +
                             fold->output + "'; '" + result + "' keeps this rank's own partial)");
      ++i;  // the row kernel, done
    }
  }
  return out;
}

}  // namespace

void overlap_collectives(std::vector<Launch>& launches, int64_t tp_size, int64_t min_rows, Schedule& schedule, ModuleTable& modules) {
  if (tp_size < 2) return;
  launches = overlap_reductions(overlap_gathers(std::move(launches), tp_size, min_rows), tp_size, min_rows, modules, schedule);
  if (std::any_of(launches.begin(), launches.end(), [](const Launch& l) { return l.stream == 1; }))
    schedule.gpu_buffer_steps = buffer_steps(launches);
}

}  // namespace tec::codegen
