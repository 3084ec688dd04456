// The CPU LoRA kernel: adds one adapter's low-rank update to chosen rows of
// a Linear's output, y[r, :] += scale · B (A x[r, :]), in f32.
#ifndef PAGODA_WORKER_LORA_LORA_KERNEL_H_
#define PAGODA_WORKER_LORA_LORA_KERNEL_H_

#include <cstdint>

namespace pagoda::worker {

// One adapter's update of one projection, laid out for the kernel:
// A [rank, in] row-major (PEFT's lora_A) and Bᵀ [rank, out] row-major
// (PEFT's lora_B transposed, so the second product is `rank` contiguous
// axpys over the output row, which vectorize).
struct LoraKernelWeights {
  const float* a = nullptr;
  const float* b_t = nullptr;
  int rank = 0;
  int64_t in = 0;
  int64_t out = 0;
  float scale = 0;
};

// For each r in row_ids[0, num_rows): y[r * y_stride + o] += scale · Σ_k
// b_t[k * out + o] · Σ_i a[k * in + i] · x[r * in + i], o < out. `scratch`
// holds `rank` floats. Rows not listed are not touched. y_stride >= out: a
// fused projection's output (q/k/v, gate/up) is updated in place, module by
// module, through its row stride.
void AddLoraUpdate(const LoraKernelWeights& weights, const float* x, const int32_t* row_ids,
                   int num_rows, float* scratch, float* y, int64_t y_stride);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LORA_LORA_KERNEL_H_
