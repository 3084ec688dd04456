// The arithmetic rate of the int8-input weight-only kernels alone, with the
// codes in L2 (no memory stream): the row kernels (quant_a8_kernels.h, one
// output row a call) against the tile kernels (quant_tile_kernels.h, 16
// output rows a call) on 256 outputs x 2048 inputs of 4-bit codes, group
// 128, at 1, 2, 4 and 8 token rows; one thread, CPU time (so a loaded
// machine's preemption does not count), best of several passes. A kernel
// below (read bandwidth / threads) in GB/s of codes cannot keep up with
// memory: its decode is bound by instructions, not by reading weights.
//
// Usage: bench_quant_kernels [passes=7]

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "worker/cpu/quant_a8_kernels.h"
#include "worker/cpu/quant_tile_kernels.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {
namespace {

constexpr int kOut = 256;
constexpr int kIn = 2048;
constexpr int kGroups = kIn / 128;
constexpr int kRepeats = 400;  // Calls over the whole matrix a pass.

double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Inputs {
  std::vector<QuantSegment> segments;
  std::vector<uint8_t> codes = std::vector<uint8_t>(kOut * kIn / 2);
  std::vector<float> params = std::vector<float>(kOut * kGroups * 2, 0.01f);
  std::vector<int8_t> x = std::vector<int8_t>(8 * kIn);
  std::vector<float> x_scale = std::vector<float>(8 * kGroups, 0.1f);
  std::vector<float> x_sum = std::vector<float>(8 * kGroups, 0.2f);
  std::vector<float> y = std::vector<float>(8 * kOut);
  Inputs() {
    for (int g = 0; g < kGroups; ++g) segments.push_back({g * 128, 128, g});
    for (size_t k = 0; k < codes.size(); ++k) codes[k] = static_cast<uint8_t>(k * 37);
    for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<int8_t>(k * 11);
  }
};

// GB/s of codes: the best of `passes` passes of kRepeats products.
template <typename Product>
double Rate(int passes, const Product& product) {
  double best = 1e30;
  for (int pass = 0; pass < passes; ++pass) {
    const double start = ThreadSeconds();
    for (int k = 0; k < kRepeats; ++k) product();
    best = std::min(best, ThreadSeconds() - start);
  }
  return kRepeats * (kOut * kIn / 2.0) / best / 1e9;
}

int Main(int argc, char** argv) {
  const int passes = argc > 1 ? std::atoi(argv[1]) : 7;
  const QuantTileKernels* tiles = VnniQuantTileKernels();
  if (tiles == nullptr) return std::fprintf(stderr, "this CPU has no AVX-512 VNNI\n"), 2;
  const QuantA8RowFn row = QuantA8KernelsFor(SimdLevel::kAvx512).row_int4;
  Inputs in;
  std::printf("int4, %d x %d, group 128, codes in L2, one thread (GB/s of codes, CPU time)\n", kOut,
              kIn);
  std::printf("%-6s %10s %10s %10s\n", "tokens", "row", "tile", "tile/row");
  for (int rows : {1, 2, 4, 8}) {
    const double row_rate = Rate(passes, [&] {
      for (int o = 0; o < kOut; ++o) {
        row(in.codes.data() + o * kIn / 2, in.params.data() + o * kGroups * 2, in.segments.data(),
            kGroups, in.x.data(), kIn, in.x_scale.data(), in.x_sum.data(), rows, rows,
            in.y.data() + o, kOut, false);
      }
    });
    const double tile_rate = Rate(passes, [&] {
      for (int t = 0; t < kOut / kQuantTileRows; ++t) {
        tiles->tile_int4(in.codes.data() + t * kQuantTileRows * kIn / 2,
                         in.params.data() + t * kGroups * 2 * kQuantTileRows, in.segments.data(),
                         kGroups, in.x.data(), kIn, in.x_scale.data(), in.x_sum.data(), rows, rows,
                         in.y.data() + t * kQuantTileRows, kOut, kQuantTileRows, nullptr);
      }
    });
    std::printf("%-6d %10.2f %10.2f %9.2fx\n", rows, row_rate, tile_rate, tile_rate / row_rate);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
