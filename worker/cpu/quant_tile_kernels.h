#ifndef PAGODA_WORKER_CPU_QUANT_TILE_KERNELS_H_
#define PAGODA_WORKER_CPU_QUANT_TILE_KERNELS_H_

// The int8-input kernels of the CPU weight-only int4/int8 Linear
// (quant_linear.h) over an interleaved layout of 16 output rows (a tile),
// chosen at load at the AVX2 and AVX-512 levels: at AVX-512 with VNNI one
// vpdpbusd multiplies 4 inputs (broadcast) into 16 output rows at once; at
// AVX2 (quant_tile_kernels_avx2.cc) each 64-byte step is two 256-bit
// halves of 8 rows, multiplied by AVX-VNNI's vpdpbusd where the CPU has it
// and by vpmaddubsw + vpmaddwd otherwise. Either way there is no horizontal
// sum per output row, and each group's scales and zero-point offsets are one
// vector op for the whole tile (two at AVX2). The row layout (quant_a8_kernels.h) spent
// about three quarters of its instructions on those per-row steps. W8A8's
// int8 Linear (w8a8_linear.h) takes the 8-bit layout too, with its own
// per-token epilogue (W8A8TileKernels below), so a prompt's token rows
// share each load of codes instead of summing one output row at a time.
//
// Tile layout (built by PackQuantTile): the padded inputs of quant_kernels.h
// (segments of whole kQuantChunk chunks) in steps of 64 bytes.
//   8 bits: step k holds inputs 4k..4k+3; byte 4j + b = code[row j][4k + b].
//   4 bits: step k holds inputs 8k..8k+7; byte 4j + b holds code[row j][8k + b]
//           in its low nibble and code[row j][8k + 4 + b] in its high one,
//           so a mask and a shift give two vpdpbusd operands.
// Tile params: [group][scale x 16 rows, -scale * zero x 16 rows] (f32).
// Rows past the weight's last output row are zero codes and zero params.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "worker/cpu/quant_kernels.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {

inline constexpr int kQuantTileRows = 16;

// Bytes of one tile's codes for `padded_in` inputs.
inline size_t QuantTileBytes(int64_t padded_in, int bits) {
  return static_cast<size_t>(padded_in) * kQuantTileRows * bits / 8;
}

// code(j, p): the code of tile row j (< 16) at padded input p, for
// p < padded_in; writes the tile's bytes (zeroed first).
template <typename CodeOf>
void PackQuantTile(int bits, int64_t padded_in, const CodeOf& code, uint8_t* tile) {
  for (size_t k = 0; k < QuantTileBytes(padded_in, bits); ++k) tile[k] = 0;
  for (int64_t p = 0; p < padded_in; ++p) {
    for (int j = 0; j < kQuantTileRows; ++j) {
      const uint8_t c = static_cast<uint8_t>(code(j, p));
      if (bits == 8) {
        tile[(p / 4) * 64 + 4 * j + p % 4] = c;
      } else {
        const bool high = p % 8 >= 4;
        tile[(p / 8) * 64 + 4 * j + p % 4] |= high ? static_cast<uint8_t>(c << 4) : c;
      }
    }
  }
}

// The code of tile row j at padded input p (PackQuantTile's inverse).
inline int QuantTileCode(const uint8_t* tile, int bits, int j, int64_t p) {
  if (bits == 8) return tile[(p / 4) * 64 + 4 * j + p % 4];
  const uint8_t byte = tile[(p / 8) * 64 + 4 * j + p % 4];
  return p % 8 >= 4 ? byte >> 4 : byte & 0xF;
}

// One tile's contribution, for token rows r < rows (1..8) and tile rows
// j < cols (1..16):
//   y[r * ld_y + j] = sum over segments s of
//     scale[g][j] * x_scale[s * ld_s + r] * dot(r, s, j) + offset[g][j] * x_sum[s * ld_s + r]
// with dot exact in int32 (quant_a8_kernels.h's rule: the same values,
// REQUIRES the same kQuantA8MaxSegment bound) and g = segments[s].group.
// The sums of a token row never depend on the other rows of the call.
// next: null, or the next tile's codes (as many bytes), pulled into L2 at
// the pace this tile's are read. The hardware prefetcher alone kept too few
// lines in flight: with it, batch-1 int4 decode took 0.71-0.78x the time
// and batch 8 0.59-0.67x (bench_quant_decode, docs/quantization.md).
using QuantTileFn = void (*)(const uint8_t* tile, const float* params, const QuantSegment* segments,
                             int num_segments, const int8_t* x, size_t ld_x, const float* x_scale,
                             const float* x_sum, size_t ld_s, int rows, float* y, size_t ld_y,
                             int cols, const uint8_t* next);

inline constexpr int kQuantTileMaxTokens = 8;

// One token row's inputs of one segment (n, a multiple of 16) to int8, the
// rule of quant_linear.h's WeightOnlyActivations::kInt8: s = max|x| / 127,
// q = round_half_even(x / s) clamped to [-128, 127]; *scale = s and
// *qsum = s * sum(q). All q are 0 when s is 0; a NaN or infinite input
// makes s and qsum NaN (and the q 0). Every level gives the same bits.
using QuantizeGroupFn = void (*)(const float* x, int64_t n, int8_t* q, float* scale, float* qsum);

struct QuantTileKernels {
  QuantTileFn tile_int4;
  QuantTileFn tile_int8;
  QuantizeGroupFn quantize_group;
};

// The plain loop (the reference of the tests).
const QuantTileKernels& PlainQuantTileKernels();
// The AVX-512 VNNI kernels, or nullptr where the CPU lacks avx512f/bw/vl/vnni.
const QuantTileKernels* VnniQuantTileKernels();
// The AVX2 kernels over the same tiles: with AVX-VNNI's 256-bit vpdpbusd
// where vnni (nullptr where the CPU lacks avx2/fma/avx-vnni), else with
// vpmaddubsw + vpmaddwd (nullptr where it lacks avx2/fma). The quantization
// of the inputs is the plain loop's.
const QuantTileKernels* Avx2QuantTileKernels(bool vnni);

// ---- W8A8 int8 (w8a8_linear.h) over the 8-bit tile layout ----

// One tile of W8A8 codes (int8 + 128, one segment of padded_in inputs, a
// multiple of kQuantChunk) against token rows r < rows (1..8) of per-token
// int8 inputs, for tile rows j < cols (1..16):
//   y[r * ld_y + j] = float(dot(r, j) - 128 * x_sum[r]) * (x_scale[r] * w_scale[j])
//                     (+ bias[j] where bias is not null)
// dot exact in int32 (it wraps as vpdpbusd does past 2^31), each f32 step
// rounded on its own (no fused multiply-add): the steps of w8a8_linear.h's
// row path, so the same bits. w_scale and bias hold the tile's 16 rows.
// next: as QuantTileFn's (the first call on a tile: the block's other calls
// find the codes in L1/L2).
using W8A8TileFn = void (*)(const uint8_t* tile, int64_t padded_in, const int8_t* x, size_t ld_x,
                            const float* x_scale, const int32_t* x_sum, const float* w_scale,
                            const float* bias, int rows, float* y, size_t ld_y, int cols,
                            const uint8_t* next);

// One token row of n inputs (any n >= 1) to int8, W8A8's rule:
// s = max|x| / 127, q = round_half_even(x / s) clamped to [-128, 127],
// *scale = s, *sum = sum(q); writes q[0, n). All q and *sum are 0 when s is
// 0; a NaN or infinite input makes *scale NaN (q and *sum 0). Every level
// gives the same bits.
using QuantizeTokenFn = void (*)(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum);

struct W8A8TileKernels {
  W8A8TileFn tile;
  QuantizeTokenFn quantize_token;
};

// The plain loops (the reference of the tests, and the quantization of
// the levels without VNNI).
const W8A8TileKernels& PlainW8A8TileKernels();
// The AVX-512 VNNI kernels, or nullptr where the CPU lacks avx512f/bw/vl/vnni.
const W8A8TileKernels* VnniW8A8TileKernels();
// The AVX2 kernels, as Avx2QuantTileKernels.
const W8A8TileKernels* Avx2W8A8TileKernels(bool vnni);

// ---- the choice at load ----

// Which kernels an int8 Linear (weight-only with int8 inputs, W8A8 int8)
// takes. kBest: the tiles at the AVX2 and AVX-512 levels, with the widest
// VNNI the CPU has (AVX-512 VNNI at the AVX-512 level, else AVX-VNNI, else
// vpmaddubsw + vpmaddwd); the row layout at the plain level. kTilesNoVnni:
// the AVX2 tiles without VNNI at any vector level (a CPU without VNNI's
// path, forced for tests and benchmarks on one with it). kRows: the row
// layout at any level. All give the same bits.
enum class Int8Layout { kBest, kTilesNoVnni, kRows };

// The tile kernels `layout` gives at `level`, or nullptr for the row layout.
const QuantTileKernels* ChooseQuantTileKernels(SimdLevel level, Int8Layout layout);
const W8A8TileKernels* ChooseW8A8TileKernels(SimdLevel level, Int8Layout layout);
// What kBest gives at `level` on this CPU, named: "avx512 vnni", "avx-vnni",
// "avx2 vpmaddubsw" or "rows" (the worker's log line at start, and the
// tests that check a CPU's kernels, such as the emulated-CPU ones).
std::string_view Int8KernelsName(SimdLevel level);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_QUANT_TILE_KERNELS_H_
