// Times the CPU backend's Linear on the benchmark model's weight shapes
// (hidden 512, intermediate 1536, vocab 8192) at decode and prefill batch
// sizes: median microseconds per call, GFLOP/s and weight GB/s. Calls cycle
// through copies of the weight filling 128 MB, more than the L3 holds, so
// each call streams its weight from memory as a decode step does; "hot"
// keeps one copy, which a small model's step reads from the L3 (the b1
// model's 124 MiB fit this machine's 300 MiB L3). The rows to time may be
// listed (speculative decoding's verify step runs k + 1 rows a sequence).
//   bench_cpu_linear [--threads 2] [--dtype f32|bf16|f16] [--weights cold|hot]
//                    [--rows 1,4,8,...]
// or by position, in that order: bench_cpu_linear 1 f32 hot 1,4,5,6,8

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "worker/cpu/cpu_backend.h"

ABSL_FLAG(int, threads, 2, "CPU backend threads.");
ABSL_FLAG(std::string, dtype, "f32", "Weight dtype: f32, bf16 or f16.");
ABSL_FLAG(std::string, weights, "cold",
          "cold: cycle through 128 MB of weight copies (read from memory); hot: one copy.");
ABSL_FLAG(pagoda::bench::PositiveIntList, rows,
          (pagoda::bench::PositiveIntList{{1, 4, 8, 16, 32, 64, 256, 2048}}),
          "Rows (tokens) per call to time, each 1..4096.");

namespace pagoda::worker {
namespace {

constexpr size_t kColdBytes = size_t{128} << 20;

double MedianMicros(Backend& backend, const std::vector<Tensor>& weights,
                    const std::vector<float>& x, int rows, std::vector<float>& y) {
  std::vector<double> times;
  const auto budget = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (times.size() < 5 || (times.size() < 200 && std::chrono::steady_clock::now() < budget)) {
    const auto start = std::chrono::steady_clock::now();
    const Tensor& weight = weights[times.size() % weights.size()];
    backend.Linear(x.data(), rows, weight, nullptr, y.data(), DType::kF32);
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

constexpr const char* kProgram = "bench_cpu_linear";

// --dtype's DType (one it names, checked).
DType WeightDType() {
  const std::string name = absl::GetFlag(FLAGS_dtype);
  bench::CheckFlags(kProgram, {bench::OneOf("dtype", name, {"f32", "bf16", "f16"})});
  return FindDTypeNamed(name, &DTypeNames::short_name)->dtype;
}

int Main(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {kProgram,
                                "bench_cpu_linear [--threads N] [--dtype f32|bf16|f16] "
                                "[--weights cold|hot] [--rows 1,4,...], or those by position"},
                               {"threads", "dtype", "weights", "rows"});
  const int threads = absl::GetFlag(FLAGS_threads);
  const std::string weights = absl::GetFlag(FLAGS_weights);
  const std::vector<int> row_counts = absl::GetFlag(FLAGS_rows).values;
  bench::CheckFlags(
      kProgram, {bench::Threads(threads), bench::OneOf("weights", weights, {"cold", "hot"}),
                 flag_check::Range("rows", *std::max_element(row_counts.begin(), row_counts.end()),
                                   1, 4096)});
  const DType dtype = WeightDType();
  const bool hot = weights == "hot";
  auto backend = CreateCpuBackend(threads);
  struct Shape {
    const char* name;
    int64_t out, in;
  };
  const Shape shapes[] = {
      {"qkv", 768, 512}, {"gate_up", 3072, 512}, {"down", 512, 1536}, {"lm_head", 8192, 512}};
  std::printf("%-8s %6s %10s %8s %8s\n", "weight", "rows", "us", "GFLOP/s", "GB/s");
  for (const Shape& shape : shapes) {
    const size_t n = static_cast<size_t>(shape.out) * shape.in;
    std::vector<float> raw(n);
    for (size_t i = 0; i < n; ++i) raw[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
    const size_t copies = hot ? 1 : std::max<size_t>(1, kColdBytes / (n * DTypeSize(dtype)));
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<Tensor> weights;
    for (size_t c = 0; c < copies; ++c) {
      buffers.push_back(backend->Allocate(dtype, n));
      ConvertFromFloat(dtype, raw.data(), n, buffers.back()->raw());
      weights.push_back(Tensor::Of(*buffers.back(), {shape.out, shape.in}));
    }
    for (int rows : row_counts) {
      std::vector<float> x(static_cast<size_t>(rows) * shape.in, 0.5f);
      std::vector<float> y(static_cast<size_t>(rows) * shape.out);
      const double us = MedianMicros(*backend, weights, x, rows, y);
      std::printf("%-8s %6d %10.1f %8.1f %8.1f\n", shape.name, rows, us,
                  2.0 * rows * static_cast<double>(n) / us / 1e3,
                  static_cast<double>(n * DTypeSize(dtype)) / us / 1e3);
    }
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
