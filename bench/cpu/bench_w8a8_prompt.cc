// Prompts through the CPU W8A8 int8 Linear (worker/cpu/w8a8_linear.h) on
// the projections of a Llama-3.2-1B-shaped model (q/k/v, o, gate/up, down;
// hidden 2048, intermediate 8192, 32 query and 8 KV heads of 64), random
// int8 codes with one scale a channel, per-token int8 inputs, against in the
// same run:
//   - the row layout (W8A8Layout::kRows: one output row after another, four
//     token rows a call; the prompt path before the tile layout, and still
//     that of CPUs without VNNI), over the same codes;
//   - the same codes as an int8 weight-only (W8A16) Linear with group 128
//     and int8 inputs per group (quant_linear.h's default): the same tile
//     kernel's loop with a scale and zero-point offset a group;
//   - f32 dense weights through panel_linear.h's PanelLinear (gemm6x16), and
//     through the backend's Linear (which takes PanelLinear below 256 inputs
//     and its tile4 kernels above, at AVX-512).
// GOP/s counts two operations a multiply-add (int8 for W8A8, f32 for the
// dense ones). The variants' passes alternate (one pass of each in turn,
// `iterations` times) so a shared machine's load falls on all alike; best
// pass. Four layers are 245 MB of int8 codes and 980 MB of f32, past the
// 300 MiB L3 for the f32 weights; a W8A8 projection's codes (4-33 MB) are
// read once a block of 64 token rows either way.
//
// Usage: bench_w8a8_prompt [--threads 2] [--layers 4] [--iterations 3] [--tokens 64,512]
// or by position, in that order: bench_w8a8_prompt 2 4 3 64,512

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/panel_linear.h"
#include "worker/cpu/quant_linear.h"
#include "worker/cpu/simd.h"
#include "worker/cpu/thread_pool.h"
#include "worker/cpu/w8a8_linear.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

ABSL_FLAG(int, threads, 2, "Threads of the pool and the backend.");
ABSL_FLAG(int, layers, 4, "Llama-3.2-1B-shaped layers (1..64).");
ABSL_FLAG(int, iterations, 3, "Alternated passes of every variant (1..1000).");
ABSL_FLAG(pagoda::bench::PositiveIntList, tokens, (pagoda::bench::PositiveIntList{{64, 512}}),
          "Prompt token rows to time, comma separated, each 1..8192.");

namespace pagoda::worker {
namespace {

struct Projection {
  int64_t out;
  int64_t in;
};

// q/k/v stacked, o, gate/up stacked, down.
constexpr Projection kLayer[] = {
    {2048 + 2 * 512, 2048}, {2048, 2048}, {2 * 8192, 2048}, {2048, 8192}};

uint64_t Next(uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

QuantizedWeight RandomW8A8Weight(const Projection& p, uint64_t& state) {
  QuantizedWeight w = SizedWeight("bench", 8, p.out, p.in, 1);
  w.code_type = CodeType::kUnsignedInt;
  w.input_quant = InputQuant::kInt8PerToken;
  for (uint8_t& code : w.codes) code = static_cast<uint8_t>(Next(state));
  for (size_t k = 0; k < w.scales.size(); ++k) {
    w.scales[k] = 0.001f * static_cast<float>(1 + Next(state) % 16);
    w.zeros[k] = 128.0f;
  }
  return w;
}

// The same codes as weight-only int8, group 128, zero point 128.
QuantizedWeight GroupedWeight(const QuantizedWeight& w8a8) {
  const int64_t groups = w8a8.in_features / 128;
  QuantizedWeight w = SizedWeight("bench", 8, w8a8.out_features, w8a8.in_features, groups);
  w.codes = w8a8.codes;
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t g = 0; g < groups; ++g) {
      w.scales[o * groups + g] = w8a8.scales[o];
      w.zeros[o * groups + g] = 128.0f;
    }
  }
  for (int64_t i = 0; i < w.in_features; ++i) w.group_of_input[i] = static_cast<int32_t>(i / 128);
  return w;
}

// f32 weights of the same shape, through PanelLinear directly.
class PanelF32Linear final : public Linear {
 public:
  PanelF32Linear(ThreadPool* pool, const Buffer& weight, const Projection& p)
      : pool_(pool),
        simd_(SimdKernelsFor(BestSimdLevel())),
        p_(p),
        weight_(Tensor::Of(weight, {p.out, p.in})) {}
  int64_t in_features() const override { return p_.in; }
  int64_t out_features() const override { return p_.out; }
  size_t weight_bytes() const override { return static_cast<size_t>(p_.out * p_.in) * 4; }
  void Forward(const void* x, int rows, void* y) override {
    PanelLinear(*pool_, simd_, static_cast<const float*>(x), rows, weight_, nullptr,
                static_cast<float*>(y));
  }

 private:
  ThreadPool* pool_;
  const SimdKernels& simd_;
  Projection p_;
  Tensor weight_;
};

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Variant {
  std::string name;
  std::vector<std::unique_ptr<Linear>> linears;
  double wall = 1e30;
  double cpu = 1e30;
};

// One pass of `rows` token rows through every Linear of `v`, kept if best.
// The inputs vary (a ramp), so the int8 quantization sees real ranges.
void Pass(Variant& v, int rows) {
  static std::vector<float> x;
  x.resize(static_cast<size_t>(rows) * 8192);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i * 37) % 101) - 0.5f;
  std::vector<float> y(static_cast<size_t>(rows) * 16384);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const double cpu_start = ThreadSeconds();
  for (auto& linear : v.linears) linear->Forward(x.data(), rows, y.data());
  v.wall = std::min(v.wall, std::chrono::duration<double>(Clock::now() - start).count());
  v.cpu = std::min(v.cpu, ThreadSeconds() - cpu_start);
}

int Main(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_w8a8_prompt",
                                "bench_w8a8_prompt [--threads N] [--layers N] [--iterations N] "
                                "[--tokens 64,512], or those by position"},
                               {"threads", "layers", "iterations", "tokens"});
  const int threads = absl::GetFlag(FLAGS_threads);
  const int layers = absl::GetFlag(FLAGS_layers);
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const std::vector<int> token_counts = absl::GetFlag(FLAGS_tokens).values;
  bench::CheckFlags(
      "bench_w8a8_prompt",
      {bench::Threads(threads), flag_check::Range("layers", layers, 1, 64),
       flag_check::Range("iterations", iterations, 1, 1000),
       flag_check::Range("tokens", *std::max_element(token_counts.begin(), token_counts.end()), 1,
                         8192)});
  std::printf("simd %s, %d threads, %d layers\n",
              std::string(SimdLevelName(BestSimdLevel())).c_str(), threads, layers);
  ThreadPool pool(threads);
  auto backend = CreateCpuBackend(threads);
  std::vector<Variant> variants(5);
  variants[0].name = "w8a8 tiles";
  variants[1].name = "w8a8 rows (before)";
  variants[2].name = "f32 PanelLinear";
  variants[3].name = "f32 backend Linear";
  variants[4].name = "w8a16 g128 tiles";
  std::vector<std::unique_ptr<Buffer>> f32_weights;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  double macs_per_token = 0;
  size_t int8_bytes = 0;
  for (int l = 0; l < layers; ++l) {
    for (const Projection& p : kLayer) {
      const QuantizedWeight w = RandomW8A8Weight(p, state);
      variants[0].linears.push_back(
          CreateCpuW8A8Linear(w, &pool, BestSimdLevel(), W8A8Layout::kBest));
      variants[1].linears.push_back(
          CreateCpuW8A8Linear(w, &pool, BestSimdLevel(), W8A8Layout::kRows));
      int8_bytes += variants[0].linears.back()->weight_bytes();
      auto buffer = backend->Allocate(DType::kF32, static_cast<size_t>(p.out * p.in));
      auto* values = static_cast<float*>(buffer->raw());
      for (int64_t k = 0; k < p.out * p.in; ++k) {
        values[k] = (static_cast<float>(w.codes[k]) - 128.0f) * w.scales[k / p.in];
      }
      variants[2].linears.push_back(std::make_unique<PanelF32Linear>(&pool, *buffer, p));
      variants[3].linears.push_back(
          std::make_unique<DenseLinear>(backend.get(), *buffer, p.out, p.in, DType::kF32));
      f32_weights.push_back(std::move(buffer));
      variants[4].linears.push_back(CreateCpuQuantLinear(GroupedWeight(w), &pool, BestSimdLevel(),
                                                         WeightOnlyActivations::kInt8));
      macs_per_token += static_cast<double>(p.out * p.in);
    }
  }
  std::printf("int8 weights %.1f MB, f32 weights %.1f MB, %.1f M multiply-adds a token\n",
              int8_bytes / 1e6, 4 * macs_per_token / 1e6, macs_per_token / 1e6);
  std::printf("%-7s %-20s %10s %10s %9s %11s\n", "tokens", "variant", "wall_ms", "cpu_ms", "GOP/s",
              "wall/first");
  for (int rows : token_counts) {
    for (Variant& v : variants) v.wall = v.cpu = 1e30;
    for (int it = 0; it < iterations; ++it) {
      for (Variant& v : variants) Pass(v, rows);
    }
    for (const Variant& v : variants) {
      std::printf("%-7d %-20s %10.2f %10.2f %9.1f %10.2fx\n", rows, v.name.c_str(), v.wall * 1e3,
                  v.cpu * 1e3, 2 * macs_per_token * rows / v.wall / 1e9, v.wall / variants[0].wall);
    }
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
