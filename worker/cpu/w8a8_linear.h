#ifndef PAGODA_WORKER_CPU_W8A8_LINEAR_H_
#define PAGODA_WORKER_CPU_W8A8_LINEAR_H_

// The CPU backend's Linear for the formats that keep one code a byte with
// one scale a channel: compressed-tensors int-quantized W8A8 (int8 weights,
// dynamic per-token int8 activations, int32 dot products), and FP8 E4M3
// weights (compressed-tensors float-quantized, vLLM's fp8, online FP8),
// whose inputs are quantized to E4M3 per token or by a static scale as
// vLLM's FP8 GEMMs take them, then multiplied in f32 (every product of two
// E4M3 values is exact in f32), the codes widened in registers. The int8
// codes take quant_tile_kernels.h's tile layout of 16 output rows at the
// AVX2 and AVX-512 levels (decode and prompts alike), else one row after
// another.

#include <memory>

#include "worker/cpu/quant_tile_kernels.h"
#include "worker/cpu/simd.h"
#include "worker/cpu/thread_pool.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

// Where the int8 codes lie (quant_tile_kernels.h's Int8Layout). kBest:
// tiles of 16 output rows at the AVX2 and AVX-512 levels, each load of
// codes shared by up to 8 token rows and a prompt taken in blocks of token
// rows; rows at the plain level. kTilesNoVnni: the AVX2 tiles without
// VNNI. kRows: one output row after another (w8a8_kernels.h) at any level,
// kept selectable for tests and benchmarks. All give the same bits. FP8
// codes always lie in rows.
using W8A8Layout = Int8Layout;

// A Linear over `weight` (x and y f32) on `pool`, which must outlive it,
// with the kernels of `level`. Per token row r and output o:
//   int8:  y = (sum_i (code[o, i] - 128) * q[r, i]) * s_x[r] * s_w[o]
//          q = round_half_even(x / s_x), s_x = max|x[r]| / 127
//   FP8:   y = (sum_i E4M3(code[o, i]) * q[r, i]) * s_x[r] * s_w[o]
//          q = E4M3(x / s_x), s_x = max(max|x[r]| / 448, 1 / (448 * 512))
//          (vLLM's per-token floor) or the static input_scale; q = x, s_x = 1
//          for FP8 weights without input quantization.
// plus the bias. REQUIRES: weight.bits == 8, one group, and either
// code_type kFloat8E4M3 (zeros 0) or input_quant kInt8PerToken (zeros 128).
std::unique_ptr<Linear> CreateCpuW8A8Linear(const QuantizedWeight& weight, ThreadPool* pool,
                                            SimdLevel level, W8A8Layout layout = W8A8Layout::kBest);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_W8A8_LINEAR_H_
