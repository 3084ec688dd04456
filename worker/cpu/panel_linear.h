#ifndef PAGODA_WORKER_CPU_PANEL_LINEAR_H_
#define PAGODA_WORKER_CPU_PANEL_LINEAR_H_

// PanelLinear: the CPU linear of many token rows (prefill) as a blocked matrix
// product over packed weight panels.

#include "worker/backend.h"
#include "worker/cpu/simd.h"
#include "worker/cpu/thread_pool.h"

namespace pagoda::worker {

// Linear of many token rows (a prompt) as a blocked matrix product:
// y[r, o] = sum_k x[r, k] * weight[o, k] (+ bias[o]), x [rows, in] and y
// [rows, out] f32, weight [out, in] of any stored dtype.
//
// The output features are split among the pool's threads in panels of 16.
// For each panel and each depth block of kPanelDepth inputs the thread packs
// the panel's weight slice once (widened to f32, transposed depth-major:
// 16 KiB, held in L1) and runs every token row over it, six rows at a time,
// with the SIMD level's gemm6x16: each panel load feeds six broadcast
// multiply-adds, so the product runs near the FMA peak where the one-token
// tiles (which re-read the weights from cache for every four tokens and sum
// each dot product across a vector) stay at a fraction of it.
//
// REQUIRES: simd.gemm6x16 != nullptr, rows >= 1.
inline constexpr int64_t kPanelDepth = 256;
inline constexpr int kPanelRowBlock = 256;
void PanelLinear(ThreadPool& pool, const SimdKernels& simd, const float* x, int rows,
                 const Tensor& weight, const float* bias, float* y);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CPU_PANEL_LINEAR_H_
