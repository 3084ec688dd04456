#ifndef PAGODA_WORKER_CPU_QUANT_LINEAR_H_
#define PAGODA_WORKER_CPU_QUANT_LINEAR_H_

// The CPU backend's weight-only int4/int8 Linear (AWQ, GPTQ,
// compressed-tensors W4A16/W8A16): codes repacked once at load into
// quant_kernels.h's chunked layout, per-group scales and offsets beside them,
// and a forward pass that widens codes to f32 in registers and accumulates
// in f32.

#include <memory>

#include "worker/cpu/simd.h"
#include "worker/cpu/thread_pool.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

// A Linear over `weight` (x and y f32, no bias) running the kernels of
// `level` on `pool`, which must outlive it. The math, per output o and group
// g with scale s and zero z:
//   y[o] = sum_g s * (sum_{i in g} code[o, i] * x[i]) - s * z * (sum_{i in g} x[i])
// which is sum_i (code - z) * s * x[i], the dequantized weight, with the
// group's sum of x computed once per token row for every output.
// Inputs are regrouped (act-order g_idx) and padded per group to whole
// chunks; x is gathered into that order once per Forward when needed.
// REQUIRES: weight.bits is 4 or 8 and its arrays are consistent (as the
// readers of worker/quant/ make them).
std::unique_ptr<Linear> CreateCpuQuantLinear(const QuantizedWeight& weight, ThreadPool* pool,
                                             SimdLevel level);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_QUANT_LINEAR_H_
