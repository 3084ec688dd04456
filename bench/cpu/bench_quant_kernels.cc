// The arithmetic rate of the int8-input weight-only kernels alone, with the
// codes in L2 (no memory stream): the row kernels (quant_a8_kernels.h, one
// output row a call) against the tile kernels (quant_tile_kernels.h, 16
// output rows a call) on 256 outputs x 2048 inputs of 4- or 8-bit codes,
// group 128, at 1, 2, 4 and 8 token rows, at each level this CPU runs:
// AVX-512 (row and tile kernels with AVX-512 VNNI) and AVX2 (the row
// kernels' vpmaddubsw / vpmaddwd, the tiles with AVX-VNNI's vpdpbusd and
// with vpmaddubsw + vpmaddwd, the path of a CPU without VNNI); one thread,
// CPU time (so a loaded machine's preemption does not count), best of
// several passes. A kernel below (read bandwidth / threads) in GB/s of codes
// cannot keep up with memory: its decode is bound by instructions, not by
// reading weights.
//
// Usage: bench_quant_kernels [--passes 7] [--bits 4|8]
// or by position, in that order: bench_quant_kernels 15 8

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "worker/cpu/quant_a8_kernels.h"
#include "worker/cpu/quant_tile_kernels.h"
#include "worker/cpu/simd.h"

ABSL_FLAG(int, passes, 7, "Passes per kernel, the best one kept (1..1000).");
ABSL_FLAG(int, bits, 4, "Code width: 4 or 8.");

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
  std::vector<uint8_t> codes = std::vector<uint8_t>(kOut * kIn);
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
double Rate(int passes, int bits, const Product& product) {
  double best = 1e30;
  for (int pass = 0; pass < passes; ++pass) {
    const double start = ThreadSeconds();
    for (int k = 0; k < kRepeats; ++k) product();
    best = std::min(best, ThreadSeconds() - start);
  }
  return kRepeats * (kOut * kIn * bits / 8.0) / best / 1e9;
}

// GB/s of codes of the row kernels of `level` (one output row a call, up
// to max_rows token rows: the AVX2 ones take 8 rows in two calls, as the
// Linear does).
double RowRate(int passes, int bits, const Inputs& in, SimdLevel level, int rows) {
  const QuantA8Kernels& kernels = QuantA8KernelsFor(level);
  const QuantA8RowFn row = bits == 4 ? kernels.row_int4 : kernels.row_int8;
  std::vector<float> y(8 * kOut);
  return Rate(passes, bits, [&] {
    for (int o = 0; o < kOut; ++o) {
      for (int r = 0; r < rows; r += kernels.max_rows) {
        row(in.codes.data() + o * kIn * bits / 8, in.params.data() + o * kGroups * 2,
            in.segments.data(), kGroups, in.x.data() + r * kIn, kIn, in.x_scale.data() + r,
            in.x_sum.data() + r, rows, std::min(kernels.max_rows, rows - r),
            y.data() + r * kOut + o, kOut, false);
      }
    }
  });
}

// GB/s of codes of the tile kernels `tiles` (16 output rows a call).
double TileRate(int passes, int bits, const Inputs& in, const QuantTileKernels& tiles, int rows) {
  std::vector<float> y(8 * kOut);
  const QuantTileFn tile = bits == 4 ? tiles.tile_int4 : tiles.tile_int8;
  return Rate(passes, bits, [&] {
    for (int t = 0; t < kOut / kQuantTileRows; ++t) {
      tile(in.codes.data() + t * kQuantTileRows * kIn * bits / 8,
           in.params.data() + t * kGroups * 2 * kQuantTileRows, in.segments.data(), kGroups,
           in.x.data(), kIn, in.x_scale.data(), in.x_sum.data(), rows, rows,
           y.data() + t * kQuantTileRows, kOut, kQuantTileRows, nullptr);
    }
  });
}

int Main(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_quant_kernels",
                                "bench_quant_kernels [--passes N] [--bits 4|8], or those by "
                                "position"},
                               {"passes", "bits"});
  const int passes = absl::GetFlag(FLAGS_passes);
  const int bits = absl::GetFlag(FLAGS_bits);
  bench::CheckFlags("bench_quant_kernels",
                    {flag_check::Range("passes", passes, 1, 1000),
                     bench::OneOf("bits", std::to_string(bits), {"4", "8"})});
  const QuantTileKernels* avx512 = VnniQuantTileKernels();
  const QuantTileKernels* avx_vnni = Avx2QuantTileKernels(true);
  const QuantTileKernels* avx2 = Avx2QuantTileKernels(false);
  if (avx2 == nullptr) return std::fprintf(stderr, "this CPU has no AVX2\n"), 2;
  Inputs in;
  std::printf("int%d, %d x %d, group 128, codes in L2, one thread (GB/s of codes, CPU time)\n",
              bits, kOut, kIn);
  std::printf("%-6s %10s %10s %10s | %10s %14s %15s %12s %12s\n", "tokens", "512 row", "512 tile",
              "tile/row", "avx2 row", "avx2 tile vnni", "avx2 tile maddubs", "vnni/row",
              "maddubs/row");
  for (int rows : {1, 2, 4, 8}) {
    double row512 = 0, tile512 = 0, vnni = 0;
    if (avx512 != nullptr) {
      row512 = RowRate(passes, bits, in, SimdLevel::kAvx512, rows);
      tile512 = TileRate(passes, bits, in, *avx512, rows);
    }
    const double row2 = RowRate(passes, bits, in, SimdLevel::kAvx2, rows);
    if (avx_vnni != nullptr) vnni = TileRate(passes, bits, in, *avx_vnni, rows);
    const double maddubs = TileRate(passes, bits, in, *avx2, rows);
    std::printf("%-6d %10.2f %10.2f %9.2fx | %10.2f %14.2f %17.2f %11.2fx %11.2fx\n", rows, row512,
                tile512, row512 > 0 ? tile512 / row512 : 0.0, row2, vnni, maddubs, vnni / row2,
                maddubs / row2);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
