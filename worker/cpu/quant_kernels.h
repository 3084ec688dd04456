#ifndef PAGODA_WORKER_CPU_QUANT_KERNELS_H_
#define PAGODA_WORKER_CPU_QUANT_KERNELS_H_

// The inner loops of the CPU weight-only int4/int8 Linear (quant_linear.h),
// at each SIMD level of simd.h: the codes of one weight row are widened to
// f32 in registers and multiplied into up to eight token rows, accumulating in
// f32; nothing dequantized is ever written to memory.
//
// Layout (built by quant_linear.cc): a weight row holds `padded_in` codes in
// segments, each a run of inputs of one quantization group, each padded to a
// multiple of kQuantChunk codes (the padded inputs read x = 0). 8-bit codes
// are one byte each; 4-bit codes are packed per chunk of 32 in 16 bytes,
// byte j holding code j in its low nibble and code j + 16 in its high one,
// so one 16-byte load widens to two 16-code halves.

#include <cstddef>
#include <cstdint>

#include "worker/cpu/simd.h"

namespace pagoda::worker {

inline constexpr int kQuantChunk = 32;

// Inputs [start, start + length) of the padded row, all of `group`.
struct QuantSegment {
  int32_t start;   // A multiple of kQuantChunk.
  int32_t length;  // A multiple of kQuantChunk.
  int32_t group;
};

// One weight row's contribution, for r < rows (1..QuantKernels::max_rows):
//   y[r * ld_y] = sum over segments s of
//     params[2 g] * sum_{i in s} code[i] * x[r * ld_x + i] + params[2 g + 1] * xsum[r * ld_s + s]
// with g = segments[s].group, params[2 g] the group's scale and
// params[2 g + 1] = -scale * zero, xsum[r, s] the sum of x over segment s.
// With `accumulate` the sum is added to y (a later block of segments).
using QuantRowFn = void (*)(const uint8_t* codes, const float* params, const QuantSegment* segments,
                            int num_segments, const float* x, size_t ld_x, const float* xsum,
                            size_t ld_s, int rows, float* y, size_t ld_y, bool accumulate);

struct QuantKernels {
  QuantRowFn row_int4;
  QuantRowFn row_int8;
  // Token rows one call takes at most: each widened chunk of codes serves
  // them all (8 at AVX-512, whose 32 registers hold their sums; 4 below).
  int max_rows;
};

// REQUIRES: level is in SupportedSimdLevels().
const QuantKernels& QuantKernelsFor(SimdLevel level);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_QUANT_KERNELS_H_
