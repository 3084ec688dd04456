// Times the CPU backend's Linear on the benchmark model's weight shapes
// (hidden 512, intermediate 1536, vocab 8192) at decode and prefill batch
// sizes: median microseconds per call, GFLOP/s and weight GB/s. Calls cycle
// through copies of the weight filling 128 MB, more than the L3 holds, so
// each call streams its weight from memory as a decode step does; "hot"
// keeps one copy, which a small model's step reads from the L3 (the b1
// model's 124 MiB fit this machine's 300 MiB L3). The rows to time may be
// listed (speculative decoding's verify step runs k + 1 rows a sequence).
//   bench_cpu_linear [threads=2] [dtype=f32|bf16|f16] [cold|hot] [rows=1,4,8,...]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "worker/cpu/cpu_backend.h"

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

int Main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string dtype_name = argc > 2 ? argv[2] : "f32";
  // Weight dtype by its short name (f32, f16, bf16); f32 for anything else.
  const DTypeNames* named = FindDTypeNamed(dtype_name, &DTypeNames::short_name);
  const DType dtype = named == nullptr ? DType::kF32 : named->dtype;
  const bool hot = argc > 3 && std::string(argv[3]) == "hot";
  std::vector<int> row_counts = {1, 4, 8, 16, 32, 64, 256, 2048};
  if (argc > 4) {
    row_counts.clear();
    for (absl::string_view part : absl::StrSplit(argv[4], ',')) {
      int rows = 0;
      if (!absl::SimpleAtoi(part, &rows) || rows < 1 || rows > 4096) {
        std::fprintf(stderr, "bench_cpu_linear: rows \"%s\" is not in 1..4096\n",
                     std::string(part).c_str());
        return 1;
      }
      row_counts.push_back(rows);
    }
  }
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
