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

// Reduce-scatters of a GEMM's output: a block per destination rank, reduced to it while the
// next block computes.
std::vector<Launch> overlap_reductions(std::vector<Launch> in, int64_t tp, int64_t min_rows) {
  std::vector<Launch> out;
  for (size_t i = 0; i < in.size(); ++i) {
    Launch& scatter = in[i];
    if (scatter.kind != Launch::Kind::collective || scatter.collective.op != "reduce_scatter" || scatter.stream != 0) {
      out.push_back(std::move(scatter));
      continue;
    }
    const std::string partial = scatter.collective.send;
    // The GEMM that wrote the partial sums, already in `out`, and nothing else using them since.
    size_t k = out.size();
    while (k > 0 && !references(out[k - 1], partial)) --k;
    if (k == 0 || !splittable(out[k - 1], tp, min_rows) || out[k - 1].gemm.d != partial || out[k - 1].gemm.c == partial ||
        out[k - 1].gemm.d_type != scatter.collective.dtype || out[k - 1].gemm.m * out[k - 1].gemm.n != scatter.collective.count * tp) {
      out.push_back(std::move(scatter));
      continue;
    }
    const Launch whole = out[k - 1];
    const std::vector<Launch> after(std::make_move_iterator(out.begin() + static_cast<std::ptrdiff_t>(k)), std::make_move_iterator(out.end()));
    out.resize(k - 1);
    const int64_t block = whole.gemm.m / tp;
    for (int destination = 0; destination < tp; ++destination) {
      Launch part = whole;
      part.gemm.m = block;
      part.gemm.x_rows = part.gemm.d_rows = {destination * block, 0, 0};
      out.push_back(std::move(part));
      out.push_back(stream_edge(Launch::Kind::fork, whole.step));
      Launch reduce = scatter;
      reduce.stream = 1;
      reduce.collective.op = "reduce";
      reduce.collective.root = destination;
      reduce.collective.send_offset = destination * block * whole.gemm.n;
      out.push_back(std::move(reduce));
    }
    out.insert(out.end(), after.begin(), after.end());
    out.push_back(stream_edge(Launch::Kind::join, scatter.step));
  }
  return out;
}

}  // namespace

void overlap_collectives(std::vector<Launch>& launches, int64_t tp_size, int64_t min_rows, Schedule& schedule) {
  if (tp_size < 2) return;
  launches = overlap_reductions(overlap_gathers(std::move(launches), tp_size, min_rows), tp_size, min_rows);
  if (std::any_of(launches.begin(), launches.end(), [](const Launch& l) { return l.stream == 1; }))
    schedule.gpu_buffer_steps = buffer_steps(launches);
}

}  // namespace tec::codegen
