#ifndef PAGODA_WORKER_CPU_QUANT_LINEAR_H_
#define PAGODA_WORKER_CPU_QUANT_LINEAR_H_

// The CPU backend's weight-only int4/int8 Linear (AWQ, GPTQ,
// compressed-tensors W4A16/W8A16): codes repacked once at load into
// quant_kernels.h's chunked layout, per-group scales and offsets beside them,
// and a forward pass that either quantizes the inputs to int8 per group and
// sums integer products (quant_a8_kernels.h, the default) or widens codes to
// f32 in registers and accumulates in f32 (the exact weight-only numerics).
// With int8 inputs at the AVX2 and AVX-512 levels the codes are repacked
// instead into quant_tile_kernels.h's tiles of 16 output rows, which every
// token row (decode or prompt) runs through.

#include <memory>

#include "worker/cpu/quant_tile_kernels.h"
#include "worker/cpu/simd.h"
#include "worker/cpu/thread_pool.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

// How the weight-only Linear takes its f32 inputs (the server's
// --cpu-weight-only-activations, docs/quantization.md).
enum class WeightOnlyActivations {
  // Each token row's inputs of each quantization group become int8:
  // s = max|x| / 127 over the group's inputs, q = round_half_even(x / s)
  // (W8A8's rule, per group as vLLM's CPU IPEX path's PER_BATCH_IC_BLOCK);
  // y = sum_g w_scale * s * (sum code * q - zero * sum q), the dot exact in
  // int32. Faster decode (bench_quant_decode with VNNI's tile layout, loaded
  // machine: 1.6-1.8x at batch 1, 2.8-3.9x at batch 8); numerics of W4A8,
  // not of the checkpoint.
  kInt8,
  // x as it is, times the exactly dequantized weight, in f32.
  kFloat32,
};

// A Linear over `weight` (x and y f32, no bias) running the kernels of
// `level` on `pool`, which must outlive it. The math, per output o and group
// g with scale s and zero z:
//   y[o] = sum_g s * (sum_{i in g} code[o, i] * x[i]) - s * z * (sum_{i in g} x[i])
// which is sum_i (code - z) * s * x[i], the dequantized weight, with the
// group's sum of x computed once per token row for every output; with
// kInt8, x[i] there is each group's q * s (see above), on every path (one
// token row or a prompt's panels alike). A group longer than
// kQuantA8MaxSegment keeps f32 inputs.
// Inputs are regrouped (act-order g_idx) and padded per group to whole
// chunks; x is gathered into that order once per Forward when needed.
// With kInt8, `layout` picks the tiles or the row layout
// (quant_tile_kernels.h's Int8Layout; the same bits either way).
// REQUIRES: weight.bits is 4 or 8 and its arrays are consistent (as the
// readers of worker/quant/ make them).
std::unique_ptr<Linear> CreateCpuQuantLinear(const QuantizedWeight& weight, ThreadPool* pool,
                                             SimdLevel level, WeightOnlyActivations activations,
                                             Int8Layout layout = Int8Layout::kBest);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_QUANT_LINEAR_H_
