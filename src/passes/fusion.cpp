// fusion: groups the nodes of a graph into steps (see schedule.h for the rules).
#include "ops/common.h"
#include "passes/schedule.h"

namespace tec {

std::string_view to_string(StepKind kind) {
  switch (kind) {
    case StepKind::gemm: return "gemm";
    case StepKind::kernel: return "kernel";
    case StepKind::collective: return "collective";
  }
  return "?";
}

namespace {

bool single_reader_not_output(const Graph& g, const std::vector<std::vector<std::pair<NodeId, int>>>& readers,
                              ValueId v) {
  return readers[static_cast<size_t>(v)].size() == 1 && !g.is_output(v);
}

bool has_epilogue(const Node& n) {
  return (n.op == "gelu" && n.attrs.get_string("approximate", "tanh") == "tanh") || n.op == "relu";
}

}  // namespace

Schedule fusion(const Graph& g, const FusionOptions& options) {
  Schedule s;
  s.internal.assign(g.values.size(), false);
  const auto readers = g.consumers();
  std::vector<int> step_of(g.nodes.size(), -1);

  auto start_step = [&](NodeId n) {
    Step step;
    step.name = g.node(n).name;
    // A GEMM step's outputs match the reference within the recipe's bound, not bit for bit. (A
    // general matmul may become one when it lowers to cuBLASLt: codegen/general.h.)
    const Node& node = g.node(n);
    const OpDef& def = builtin_ops().get(node.op);
    step.kind = def.gemm_operands ? StepKind::gemm : def.collective ? StepKind::collective : StepKind::kernel;
    step.phase = node.phase;
    step.nodes.push_back(n);
    const Value& out = g.value(node.outputs[0]);
    if (out.quantizer && step.kind == StepKind::collective && !node.computes_backward)
      step.fusions.push_back("quantize of '" + out.name + "' fused into " + node.op +
                             ": the collective's result is quantized as one tensor (per-tensor FP8 on the GPU: each rank "
                             "quantizes its rows with the group's scale and the FP8 codes are gathered, as TE's FP8 all-gather)");
    else if (out.quantizer && node.op != "linear" && node.op != "quantize" && !node.computes_backward)
      step.fusions.push_back("quantize of '" + out.name + "' fused into " + g.node(n).op + " (" +
                             (g.node(n).op == "layernorm" || g.node(n).op == "rmsnorm" ? "norm" : "producer") +
                             " + quantize)");
    s.steps.push_back(std::move(step));
    step_of[static_cast<size_t>(n)] = static_cast<int>(s.steps.size() - 1);
  };
  auto join = [&](int step, NodeId n, ValueId through, std::string reason) {
    Step& st = s.steps[static_cast<size_t>(step)];
    st.nodes.push_back(n);
    st.name += "+" + g.node(n).name;
    st.fusions.push_back(std::move(reason));
    s.internal[static_cast<size_t>(through)] = true;
    step_of[static_cast<size_t>(n)] = step;
  };

  for (NodeId n = 0; n < static_cast<NodeId>(g.nodes.size()); ++n) {
    const Node& node = g.node(n);
    if (!options.enabled) {
      start_step(n);
      continue;
    }
    // The producer step of input `slot`, if this node may join it through that value: the
    // value has no other reader, and every other input is ready by that step.
    auto joinable = [&](int slot) -> int {
      const ValueId in = node.inputs[static_cast<size_t>(slot)];
      const NodeId producer = g.value(in).producer;
      if (producer < 0 || !single_reader_not_output(g, readers, in)) return -1;
      const int st = step_of[static_cast<size_t>(producer)];
      for (ValueId other : node.inputs) {
        const NodeId p = g.value(other).producer;
        if (p >= 0 && step_of[static_cast<size_t>(p)] > st) return -1;
      }
      return st;
    };
    if (node.phase == Phase::backward) {
      // A weight gradient added into main_grad: the wgrad GEMM's C with beta = 1. A gradient's
      // quantize: fused into the kernel that makes the gradient.
      const bool into_main_grad = node.op == "add" && g.value(node.outputs[0]).storage.has_value();
      const int st = into_main_grad ? joinable(1) : node.op == "quantize" ? joinable(0) : -1;
      if (st >= 0 && into_main_grad && s.steps[static_cast<size_t>(st)].kind == StepKind::gemm &&
          g.node(s.steps[static_cast<size_t>(st)].nodes.back()).computes_backward) {
        join(st, n, node.inputs[1], "main_grad accumulation fused into " + s.steps[static_cast<size_t>(st)].name + "'s wgrad GEMM (C, beta=1)");
        continue;
      }
      if (st >= 0 && node.op == "quantize" && s.steps[static_cast<size_t>(st)].kind == StepKind::kernel) {
        join(st, n, node.inputs[0], "quantize of gradient '" + g.value(node.inputs[0]).name + "' fused into " +
                                        g.node(s.steps[static_cast<size_t>(st)].nodes.back()).name);
        continue;
      }
      start_step(n);
      continue;
    }
    if (node.phase != Phase::forward) {
      start_step(n);
      continue;
    }
    // Epilogues and residuals fuse into a linear's cuBLASLt GEMM; a gated activation (an MoE
    // expert's SwiGLU) into the grouped GEMM, whose tiles pair gate with up columns.
    auto linear_step = [&](int st) { return st >= 0 && g.node(s.steps[static_cast<size_t>(st)].nodes[0]).op == "linear"; };
    if (node.op == "swiglu" || node.op == "geglu") {
      const int st = joinable(0);
      if (st >= 0 && s.steps[static_cast<size_t>(st)].nodes.size() == 1 &&
          g.node(s.steps[static_cast<size_t>(st)].nodes[0]).op == "grouped_linear") {
        const Node& gemm = g.node(s.steps[static_cast<size_t>(st)].nodes[0]);
        join(st, n, node.inputs[0], node.op + " fused into " + gemm.name + "'s grouped GEMM step (on the GPU in its epilogue, where a tile can pair gate with up columns)");
        continue;
      }
    }
    if (has_epilogue(node)) {
      const int st = joinable(0);
      if (linear_step(st) && s.steps[static_cast<size_t>(st)].kind == StepKind::gemm &&
          s.steps[static_cast<size_t>(st)].nodes.size() == 1) {
        const Node& gemm = g.node(s.steps[static_cast<size_t>(st)].nodes[0]);
        join(st, n, node.inputs[0],
             (node.op == "gelu" ? std::string("GELU") : std::string("ReLU")) + " fused into " + gemm.name + "'s epilogue" +
                 (g.value(node.outputs[0]).quantizer ? ", writing the quantized output" : ""));
        continue;
      }
    }
    if (node.op == "add") {
      bool fused = false;
      for (int slot = 0; slot < 2 && !fused; ++slot) {
        const int st = joinable(slot);
        if (!linear_step(st) || s.steps[static_cast<size_t>(st)].kind != StepKind::gemm) continue;
        const Node& last = g.node(s.steps[static_cast<size_t>(st)].nodes.back());
        if (last.op == "add") continue;  // one residual per GEMM
        join(st, n, node.inputs[static_cast<size_t>(slot)],
             "residual add fused into " + g.node(s.steps[static_cast<size_t>(st)].nodes[0]).name + " as C (beta=1)");
        fused = true;
      }
      if (fused) continue;
      // A row-parallel linear's bias, added after its reduce-scatter (tensor parallel), and the
      // residual after it: one row kernel.
      for (int slot = 0; slot < 2 && !fused; ++slot) {
        const int st = joinable(slot);
        if (st < 0 || s.steps[static_cast<size_t>(st)].kind != StepKind::kernel || s.steps[static_cast<size_t>(st)].nodes.size() != 1) continue;
        const Node& bias = g.node(s.steps[static_cast<size_t>(st)].nodes[0]);
        if (bias.op != "bias" || g.value(node.inputs[0]).proto.shape != g.value(node.inputs[1]).proto.shape) continue;
        join(st, n, node.inputs[static_cast<size_t>(slot)], "residual add fused into " + bias.name + " (one row kernel: the bias, then the residual)");
        fused = true;
      }
      if (fused) continue;
    }
    if (node.op == "quantize") {
      const int st = joinable(0);
      if (st >= 0 && s.steps[static_cast<size_t>(st)].kind == StepKind::kernel) {
        join(st, n, node.inputs[0], "quantize of '" + g.value(node.inputs[0]).name + "' fused into " +
                                        g.node(s.steps[static_cast<size_t>(st)].nodes.back()).name);
        continue;
      }
    }
    start_step(n);
  }
  return s;
}

}  // namespace tec
