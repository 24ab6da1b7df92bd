// A training loop on tec's public API: the train plan of examples/mlp_tiny.json learns to
// imitate a fixed random "teacher" MLP of the same shape under an MSE loss.
//
//   te-compile examples/mlp_tiny.json --mode train --optimizer adamw --lr 3e-3 --shape T=128 -o train.teplan
//   tec-train-example train.teplan [--steps 400] [--backend cpu|gpu]
//
// Each step is two runs of the plan: a forward-only run (runtime scalar forward_only = 1)
// gives y, from which the loss and dy = d(loss)/dy are computed here; the full run then
// reuses the weights' copies of the first (first_microbatch = 0) and does forward, backward
// and the AdamW update. Halfway it checkpoints the session's state; at the end it restores
// that checkpoint into a new session, replays the second half and checks that every loss is
// bit-identical. Exit status 0 only if the loss fell at least 10x and the replay matched.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tec/runtime.h"

namespace {

float bf16_to_float(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_bf16(float f) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

// The teacher: y = x + fc2(gelu_tanh(fc1(layernorm(x)))), random weights of its own.
struct Teacher {
  int h, f;
  std::vector<float> w1, b1, w2, b2;
  Teacher(int hidden, int ffn) : h(hidden), f(ffn) {
    std::mt19937 rng(2024);
    auto fill = [&](std::vector<float>& v, size_t n, float stddev) {
      std::normal_distribution<float> d(0.0f, stddev);
      for (size_t i = 0; i < n; ++i) v.push_back(d(rng));
    };
    fill(w1, static_cast<size_t>(f) * h, 1.0f / std::sqrt(float(h)));
    fill(b1, static_cast<size_t>(f), 0.1f);
    fill(w2, static_cast<size_t>(h) * f, 1.0f / std::sqrt(float(f)));
    fill(b2, static_cast<size_t>(h), 0.1f);
  }
  std::vector<float> operator()(const std::vector<float>& x, int rows) const {
    std::vector<float> y(x), n(static_cast<size_t>(h)), a(static_cast<size_t>(f));
    for (int r = 0; r < rows; ++r) {
      const float* xr = &x[static_cast<size_t>(r) * h];
      float mean = 0, var = 0;
      for (int i = 0; i < h; ++i) mean += xr[i] / h;
      for (int i = 0; i < h; ++i) var += (xr[i] - mean) * (xr[i] - mean) / h;
      for (int i = 0; i < h; ++i) n[i] = (xr[i] - mean) / std::sqrt(var + 1e-5f);
      for (int j = 0; j < f; ++j) {
        float acc = b1[j];
        for (int i = 0; i < h; ++i) acc += n[i] * w1[static_cast<size_t>(j) * h + i];
        a[j] = 0.5f * acc * (1 + std::tanh(0.7978845608f * (acc + 0.044715f * acc * acc * acc)));
      }
      for (int o = 0; o < h; ++o) {
        float acc = b2[o];
        for (int j = 0; j < f; ++j) acc += a[j] * w2[static_cast<size_t>(o) * f + j];
        y[static_cast<size_t>(r) * h + o] += acc;
      }
    }
    return y;
  }
};

[[noreturn]] void die(const std::string& what, const tec::Status& s) {
  std::fprintf(stderr, "tec-train-example: %s: %s\n", what.c_str(), s.message.c_str());
  std::exit(s.code ? s.code : 1);
}

template <typename T>
T check(tec::Result<T> r, const std::string& what) {
  if (!r.ok()) die(what, r.status());
  return std::move(r.value());
}

void check(const tec::Status& s, const std::string& what) {
  if (!s.ok()) die(what, s);
}

// A session's views live in its backend's memory: the device's for the GPU.
void copy_in(const tec::TensorView& to, const std::vector<uint16_t>& from, tec::Backend backend) {
  if (backend == tec::Backend::cpu) std::memcpy(to.data, from.data(), to.bytes);
  else if (cudaMemcpy(to.data, from.data(), to.bytes, cudaMemcpyHostToDevice) != cudaSuccess) die("copy to the GPU", {7, "cudaMemcpy failed"});
}
std::vector<uint16_t> copy_out(const tec::TensorView& from, tec::Backend backend) {
  std::vector<uint16_t> to(from.bytes / 2);
  if (backend == tec::Backend::cpu) std::memcpy(to.data(), from.data, from.bytes);
  else if (cudaMemcpy(to.data(), from.data, from.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) die("copy from the GPU", {7, "cudaMemcpy failed"});
  return to;
}

// One training step on `s`; returns the loss (mean squared error) of its forward.
double train_step(tec::Session& s, const Teacher& teacher, int step, int rows, int hidden) {
  std::mt19937 rng(static_cast<uint32_t>(1000 + step));
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(rows) * hidden);
  for (float& v : x) v = bf16_to_float(float_to_bf16(normal(rng)));
  std::vector<uint16_t> xw(x.size());
  for (size_t i = 0; i < x.size(); ++i) xw[i] = float_to_bf16(x[i]);
  copy_in(check(s.input("x"), "input x"), xw, s.backend());
  const std::vector<float> target = teacher(x, rows);

  check(s.set_scalar("forward_only", 1), "forward_only");
  check(s.set_scalar("first_microbatch", 1), "first_microbatch");  // the masters changed last step
  check(s.run(), "forward run");
  const std::vector<uint16_t> yw = copy_out(check(s.output("y"), "output y"), s.backend());
  std::vector<uint16_t> dyw(x.size());
  double loss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float diff = bf16_to_float(yw[i]) - target[i];
    loss += double(diff) * diff / double(x.size());
    dyw[i] = float_to_bf16(2.0f * diff / float(x.size()));
  }
  copy_in(check(s.input("dy"), "input dy"), dyw, s.backend());
  check(s.set_scalar("forward_only", 0), "forward_only");
  check(s.set_scalar("first_microbatch", 0), "first_microbatch");  // same masters: reuse their copies
  check(s.run(), "training run");
  return loss;
}

}  // namespace

int main(int argc, char** argv) {
  std::string plan_path, backend_name = "cpu";
  int steps = 400;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (arg == "--backend" && i + 1 < argc) backend_name = argv[++i];
    else if (arg == "-h" || arg == "--help") {
      std::printf("usage: tec-train-example TRAIN_PLAN [--steps N] [--backend cpu|gpu]\n"
                  "Trains the plan's layer to imitate a fixed random teacher MLP (MSE loss, the plan's optimizer),\n"
                  "checkpoints halfway and checks that a restored session replays bit-identically.\n");
      return 0;
    } else plan_path = arg;
  }
  if (plan_path.empty() || steps < 2 || (backend_name != "cpu" && backend_name != "gpu")) {
    std::fprintf(stderr, "usage: tec-train-example TRAIN_PLAN [--steps N >= 2] [--backend cpu|gpu]\n");
    return 2;
  }
  const tec::Backend backend = backend_name == "gpu" ? tec::Backend::gpu : tec::Backend::cpu;
  const tec::Plan plan = check(tec::Plan::load_file(plan_path), "loading " + plan_path);
  tec::Session session = check(tec::Session::create(plan, {}, backend), "creating a session");
  const tec::TensorView x = check(session.input("x"), "the plan's input x");
  if (x.shape.size() != 2) die("the plan", {3, "input x must be [tokens, hidden]"});
  const int rows = static_cast<int>(x.shape[0]), hidden = static_cast<int>(x.shape[1]);
  const tec::TensorView w1 = check(session.state_tensor("fc1.weight.master"), "this example trains mlp_tiny.json");
  const Teacher teacher(hidden, static_cast<int>(w1.shape[0]));
  std::printf("training %s on the %s backend: %d tokens x %d, %d steps\n", plan_path.c_str(), backend_name.c_str(), rows, hidden,
              steps);

  const int half = steps / 2;
  std::vector<double> losses;
  std::vector<uint8_t> checkpoint;
  for (int step = 0; step < steps; ++step) {
    if (step == half) checkpoint = check(session.state(), "checkpoint");
    losses.push_back(train_step(session, teacher, step, rows, hidden));
    if (step % 50 == 0 || step == steps - 1) std::printf("step %4d  loss %.6f\n", step, losses.back());
  }
  // Restore the halfway checkpoint into a new session and replay the second half.
  tec::Session restored = check(tec::Session::create(plan, {}, backend), "creating a second session");
  check(restored.set_state(checkpoint), "restore");
  bool identical = true;
  for (int step = half; step < steps; ++step) identical &= train_step(restored, teacher, step, rows, hidden) == losses[static_cast<size_t>(step)];
  const double first = losses.front(), last = losses.back();
  std::printf("loss %.6f -> %.6f (%.1fx lower); restored from step %d: %s\n", first, last, first / last, half,
              identical ? "every later loss bit-identical" : "LOSSES DIFFER");
  return first / last >= 10.0 && identical ? 0 : 1;
}
