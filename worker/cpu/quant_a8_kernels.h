#ifndef PAGODA_WORKER_CPU_QUANT_A8_KERNELS_H_
#define PAGODA_WORKER_CPU_QUANT_A8_KERNELS_H_

// The inner loops of the CPU weight-only int4/int8 Linear (quant_linear.h)
// when its inputs are quantized to int8 (the default; see
// docs/quantization.md): the unsigned codes of one weight row against int8
// inputs, each quantization group's dot product summed exactly in int32
// (AVX-512 VNNI vpdpbusd; AVX2 vpmaddubsw for 4-bit codes, whose pair sums
// cannot saturate, and vpmaddwd on 16-bit widened values for 8-bit codes,
// whose pair sums would), then scaled in f32 once per group, as llama.cpp's
// Q4_0 x Q8_0 product does.
//
// The codes are quant_kernels.h's chunked layout; the inputs are one int8 a
// padded input, in the same (regrouped, padded) order.

#include <cstddef>
#include <cstdint>

#include "worker/cpu/quant_kernels.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {

// One weight row's contribution, for r < rows (1..QuantA8Kernels::max_rows):
//   y[r * ld_y] = sum over segments s of
//     params[2 g] * x_scale[s * ld_s + r] * dot(r, s) + params[2 g + 1] * x_sum[s * ld_s + r]
// with dot(r, s) = sum_{i in s} code[i] * x[r * ld_x + i] exactly in int32,
// g = segments[s].group, params as quant_kernels.h's (scale, -scale * zero),
// x_scale the segment's input scale and x_sum = x_scale * (sum of its int8
// inputs), both segment-major (the token rows of a segment side by side, so
// the kernel scales them all with one vector op). With `accumulate` the
// sum is added to y.
// REQUIRES: every segment at most kQuantA8MaxSegment long (the int32 sums
// cannot overflow: 255 * 128 * 65536 < 2^31).
using QuantA8RowFn = void (*)(const uint8_t* codes, const float* params,
                              const QuantSegment* segments, int num_segments, const int8_t* x,
                              size_t ld_x, const float* x_scale, const float* x_sum, size_t ld_s,
                              int rows, float* y, size_t ld_y, bool accumulate);

inline constexpr int64_t kQuantA8MaxSegment = 65536;

struct QuantA8Kernels {
  QuantA8RowFn row_int4;
  QuantA8RowFn row_int8;
  int max_rows;      // Token rows one call takes at most (8 with VNNI, 4 below).
  const char* name;  // The instructions used, for logs and benchmarks.
};

// The AVX-512 level uses VNNI where the CPU has it (avx512vnni, bw and vl), the
// AVX2 loops otherwise. REQUIRES: level is in SupportedSimdLevels().
const QuantA8Kernels& QuantA8KernelsFor(SimdLevel level);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_QUANT_A8_KERNELS_H_
