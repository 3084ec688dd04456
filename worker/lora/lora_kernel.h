// The CPU LoRA kernel: adds one adapter's low-rank update to chosen rows of
// a Linear's output, y[r, :] += scale · B (A x[r, :]), in f32, as two small
// matrix products over the rows of one adapter (the CPU backend's panel
// kernel, gemm6x16), and the layouts of A and B it reads.
#ifndef PAGODA_WORKER_LORA_LORA_KERNEL_H_
#define PAGODA_WORKER_LORA_LORA_KERNEL_H_

#include <cstdint>
#include <vector>

#include "worker/cpu/simd.h"

namespace pagoda::worker {

// Ranks per panel of A: gemm6x16's width.
inline constexpr int kLoraPanelRanks = 16;

// One adapter's update of one projection, laid out for the kernel:
// `a_panels`: A (PEFT's lora_A, [rank, in]) in ceil(rank / 16) panels, each
// depth-major [in][16] (panel p's column c is rank 16 p + c; ranks past
// `rank` are 0), as PackLoraA writes it: the shrink's weight panel, read
// once for every six rows. `b_t`: Bᵀ [rank, out] row-major (PEFT's lora_B
// transposed) followed by 16 readable floats, as TransposeLoraB writes it:
// the expand's weight panels are its column blocks, `out` apart.
struct LoraKernelWeights {
  const float* a_panels = nullptr;
  const float* b_t = nullptr;
  int rank = 0;
  int64_t in = 0;
  int64_t out = 0;
  float scale = 0;
};

// A [rank, in] row-major into LoraKernelWeights::a_panels' layout.
std::vector<float> PackLoraA(const float* a, int rank, int64_t in);
// B [out, rank] row-major into LoraKernelWeights::b_t's layout.
std::vector<float> TransposeLoraB(const float* b, int rank, int64_t out);

// Rows of one adapter the kernel takes at a time (its scratch holds that
// many rows of x, of A x and of the update).
inline constexpr int kLoraRowsPerCall = 24;

// Per-thread buffers of AddLoraUpdate, grown on first use.
struct LoraScratch {
  std::vector<float> x;      // The rows' inputs, gathered: [rows, in].
  std::vector<float> ranks;  // scale · A x: [rows, 16 · panels].
  std::vector<float> delta;  // B (scale · A x): [rows, out].
};

// For each r in row_ids[0, num_rows): y[r * y_stride + o] += scale · Σ_k
// b[o, k] · Σ_i a[k, i] · x[r * in + i], o < out. Rows not listed are not
// touched. y_stride >= out: a fused projection's output (q/k/v, gate/up) is
// updated in place, module by module, through its row stride. Runs the
// rows in calls of at most kLoraRowsPerCall: x's rows gathered, the shrink
// (rows x in by in x 16 panels) and the expand (rows x rank by rank x out)
// through simd.gemm6x16, the update added to y; where the level has no
// gemm6x16 (plain), a loop over the same layouts.
void AddLoraUpdate(const SimdKernels& simd, const LoraKernelWeights& weights, const float* x,
                   const int32_t* row_ids, int num_rows, LoraScratch& scratch, float* y,
                   int64_t y_stride);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LORA_LORA_KERNEL_H_
