#ifndef PAGODA_WORKER_CPU_CPU_BACKEND_H_
#define PAGODA_WORKER_CPU_CPU_BACKEND_H_

// CpuBackend: the host implementation of the Backend interface (linears,
// attention, element-wise ops) on one persistent thread pool.

#include <memory>

#include "worker/backend.h"
#include "worker/cpu/quant_linear.h"

namespace pagoda::worker {

// The host backend. One persistent ThreadPool of `num_threads` threads
// (0: every CPU the process may use) runs the matrix products, attention and
// element-wise ops. Linear splits the output features among the threads in
// groups of four weight rows, read in place (no packing, f16/bf16 widened in
// registers) by runtime-dispatched SIMD tiles (AVX-512 / AVX2+FMA / plain)
// that dot each group with four token rows at a time, cache-blocked so a
// decode step reads each weight from memory once. Buffers are host
// memory, so uploads and downloads are memcpy. Activations are f32; the KV
// cache may be f32, bf16 or f16 (written rounded to nearest even by SIMD
// narrowing, read by SIMD dot products and weighted sums that widen to f32). Sample
// runs worker/sampler.h's SampleRow, one row per task. `weight_only`: how the
// weight-only int4/int8 Linears (AWQ, GPTQ, W4A16/W8A16) take their inputs.
std::unique_ptr<Backend> CreateCpuBackend(
    int num_threads = 0, WeightOnlyActivations weight_only = WeightOnlyActivations::kInt8);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_CPU_BACKEND_H_
