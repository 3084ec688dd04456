// The cost of LoRA at the projection level on the CPU: for each projection
// of the benchmark model (scripts/make_tiny_model.py --preset bench: hidden
// 512, intermediate 1376), the base Linear at 32 rows against the same
// Linear followed by LoraSlots::Apply with the rows spread over 4 adapters
// and the base model (rank 16, every projection targeted), with Apply on
// the calling thread ("serial", as before) and spread over the backend's
// thread pool ("pool", what the model runs). Prints median microseconds per
// call and the ratios base / (base + LoRA) summed over a layer's seven
// projections: the decode step's projection throughput with LoRA as a
// fraction of base-only (attention, norms and sampling, which LoRA leaves
// alone, would bring a whole step's ratio closer to 1).
//   bench_lora_apply [--threads 2] [--rank 16] [--rows 32]
// or by position, in that order: bench_lora_apply 2 16 32

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/lora/lora_slots.h"

ABSL_FLAG(int, threads, 2, "CPU backend threads.");
ABSL_FLAG(int, rank, 16, "The adapters' LoRA rank (1..512).");
ABSL_FLAG(int, rows, 32, "Rows (tokens) per call (1..4096).");

namespace pagoda::worker {
namespace {

constexpr size_t kColdBytes = size_t{128} << 20;
constexpr int kAdapters = 4;

double MedianMicros(const std::function<void(size_t)>& call) {
  std::vector<double> times;
  const auto budget = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (times.size() < 5 || (times.size() < 300 && std::chrono::steady_clock::now() < budget)) {
    const auto start = std::chrono::steady_clock::now();
    call(times.size());
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

ModelConfig BenchModel() {
  ModelConfig config;
  config.hidden_size = 512;
  config.intermediate_size = 1376;
  config.num_hidden_layers = 1;
  config.num_attention_heads = 8;
  config.num_key_value_heads = 8;
  config.head_dim = 64;
  return config;
}

LoraAdapter RandomAdapter(const ModelConfig& config, int rank, std::mt19937& rng) {
  std::normal_distribution<float> normal(0, 0.05f);
  LoraAdapter adapter;
  adapter.scale = 2;
  adapter.layers.resize(1);
  for (LoraModule module : kAllLoraModules) {
    const LinearShape shape = LoraModuleShape(config, module);
    LoraMatrices m{rank, shape.in, shape.out, std::vector<float>(rank * shape.in),
                   std::vector<float>(shape.out * rank)};
    for (float& v : m.a) v = normal(rng);
    for (float& v : m.b) v = normal(rng);
    adapter.layers[0][static_cast<int>(module)] = std::move(m);
  }
  return adapter;
}

int Main(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_lora_apply",
                                "bench_lora_apply [--threads N] [--rank N] [--rows N], or those by "
                                "position"},
                               {"threads", "rank", "rows"});
  const int threads = absl::GetFlag(FLAGS_threads);
  const int rank = absl::GetFlag(FLAGS_rank);
  const int rows = absl::GetFlag(FLAGS_rows);
  bench::CheckFlags("bench_lora_apply",
                    {bench::Threads(threads), flag_check::Range("rank", rank, 1, 512),
                     flag_check::Range("rows", rows, 1, 4096)});
  auto backend = CreateCpuBackend(threads);
  const ModelConfig config = BenchModel();
  std::array<LinearShape, kNumLoraModules> shapes;
  for (LoraModule module : kAllLoraModules) {
    shapes[static_cast<int>(module)] = LoraModuleShape(config, module);
  }
  LoraSlots slots(kAdapters, rank, 1, shapes);
  std::mt19937 rng(1);
  for (int s = 1; s <= kAdapters; ++s) {
    if (!slots.Load(s, RandomAdapter(config, rank, rng)).ok()) return 1;
  }
  std::vector<int32_t> row_slots(rows);
  for (int r = 0; r < rows; ++r) row_slots[r] = r % (kAdapters + 1);  // 4 adapters + base.

  std::printf("threads %d, rank %d, rows %d, %d adapters + base\n", threads, rank, rows, kAdapters);
  std::printf("%-10s %9s %10s %8s %10s %8s\n", "projection", "base_us", "serial_us", "ratio",
              "pool_us", "ratio");
  const LoraParallelFor on_pool = [&](int64_t n, int64_t grain, const auto& fn) {
    backend->HostParallelFor(n, grain, fn);
  };
  const LoraSlots::View view = slots.Snapshot();
  double base_total = 0, serial_total = 0, pool_total = 0;
  for (LoraModule module : kAllLoraModules) {
    const LinearShape shape = shapes[static_cast<int>(module)];
    const size_t n = static_cast<size_t>(shape.out) * shape.in;
    std::vector<float> raw(n);
    for (size_t i = 0; i < n; ++i) raw[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<Tensor> weights;
    for (size_t c = 0; c < std::max<size_t>(1, kColdBytes / (n * 4)); ++c) {
      buffers.push_back(backend->Allocate(DType::kF32, n));
      ConvertFromFloat(DType::kF32, raw.data(), n, buffers.back()->raw());
      weights.push_back(Tensor::Of(*buffers.back(), {shape.out, shape.in}));
    }
    std::vector<float> x(static_cast<size_t>(rows) * shape.in, 0.5f);
    std::vector<float> y(static_cast<size_t>(rows) * shape.out);
    auto base = [&](size_t i) {
      backend->Linear(x.data(), rows, weights[i % weights.size()], nullptr, y.data(), DType::kF32);
    };
    auto with_lora = [&](const LoraParallelFor* parallel_for) {
      return [&, parallel_for](size_t i) {
        base(i);
        (void)view.Apply(x.data(), rows, row_slots.data(), {0, module}, y.data(), 0, parallel_for);
      };
    };
    const double base_us = MedianMicros(base);
    const double serial_us = MedianMicros(with_lora(nullptr));
    const double pool_us = MedianMicros(with_lora(&on_pool));
    base_total += base_us;
    serial_total += serial_us;
    pool_total += pool_us;
    std::printf("%-10s %9.1f %10.1f %8.3f %10.1f %8.3f\n",
                std::string(LoraModuleName(module)).c_str(), base_us, serial_us,
                base_us / serial_us, pool_us, base_us / pool_us);
  }
  std::printf("%-10s %9.1f %10.1f %8.3f %10.1f %8.3f\n", "layer", base_total, serial_total,
              base_total / serial_total, pool_total, base_total / pool_total);
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
