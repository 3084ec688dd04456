#include "worker/lora/lora_kernel.h"

namespace pagoda::worker {
namespace {

// Σ a[i] · b[i] over 32 partial sums: float addition does not reassociate
// without -ffast-math, so one accumulator would serialize the loop on the
// add's latency; 32 are four AVX2 vectors (eight SSE ones) in flight.
inline __attribute__((always_inline)) float Dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 32;
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  }
  // Halving the partial sums pairwise (vector adds) rather than one chain of
  // 32 dependent scalar adds, which would cost more than the loop above.
  for (int width = kLanes / 2; width >= 1; width /= 2) {
    for (int lane = 0; lane < width; ++lane) partial[lane] += partial[lane + width];
  }
  float sum = partial[0];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline __attribute__((always_inline)) void Axpy(float alpha, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

// Built twice, for AVX2 with FMA and for plain x86-64, and picked at load
// time by the CPU (GCC function multiversioning): the binaries target plain
// x86-64, and the inner loops above are written for the vectorizer.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=haswell", "default")))
#endif
void AddLoraUpdate(const LoraKernelWeights& weights, const float* x, const int32_t* row_ids,
                   int num_rows, float* scratch, float* y, int64_t y_stride) {
  for (int n = 0; n < num_rows; ++n) {
    const int64_t row = row_ids[n];
    const float* x_row = x + row * weights.in;
    for (int k = 0; k < weights.rank; ++k) {
      scratch[k] = weights.scale * Dot(weights.a + k * weights.in, x_row, weights.in);
    }
    float* y_row = y + row * y_stride;
    for (int k = 0; k < weights.rank; ++k) {
      Axpy(scratch[k], weights.b_t + k * weights.out, weights.out, y_row);
    }
  }
}

}  // namespace pagoda::worker
