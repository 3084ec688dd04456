#ifndef PAGODA_WORKER_CPU_W8A8_KERNELS_H_
#define PAGODA_WORKER_CPU_W8A8_KERNELS_H_

// The inner loops of the CPU's one-byte-a-code Linear (w8a8_linear.h), at
// each SIMD level of simd.h: the int8 dot product of W8A8 (unsigned weight
// codes against int8 activations, summed exactly in int32: VNNI vpdpbusd
// where the CPU has it, vpmaddwd otherwise), and the FP8 E4M3 dot product
// (codes widened to f32 in registers through the F16C conversion, f32
// accumulation). Both take up to kW8A8MaxRows token rows a weight row, so
// each load of codes serves them all.

#include <cstddef>
#include <cstdint>

#include "worker/cpu/simd.h"

namespace pagoda::worker {

// Rows are padded to a multiple of this many codes (the padding's x is 0).
inline constexpr int64_t kW8A8Chunk = 64;
inline constexpr int kW8A8MaxRows = 4;

// dots[r] = sum_{i < n} codes[i] * x[r * ld_x + i] for r < rows, codes read
// as unsigned bytes and x as int8, exactly (no saturation).
// REQUIRES: n is a multiple of kW8A8Chunk, rows in [1, kW8A8MaxRows].
using Int8DotFn = void (*)(const uint8_t* codes, const int8_t* x, size_t ld_x, int64_t n, int rows,
                           int32_t* dots);
// dots[r] = sum_{i < n} E4M3(codes[i]) * x[r * ld_x + i], in f32. No code
// may be a NaN (the readers refuse those). Same REQUIRES.
using Fp8DotFn = void (*)(const uint8_t* codes, const float* x, size_t ld_x, int64_t n, int rows,
                          float* dots);

struct W8A8Kernels {
  Int8DotFn int8_dot;
  Fp8DotFn fp8_dot;
  const char* int8_name;  // Which instructions int8_dot uses ("vpdpbusd", ...), for logs.
};

// REQUIRES: level is in SupportedSimdLevels().
const W8A8Kernels& W8A8KernelsFor(SimdLevel level);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_W8A8_KERNELS_H_
