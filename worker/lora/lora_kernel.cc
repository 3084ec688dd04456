#include "worker/lora/lora_kernel.h"

namespace pagoda::worker {
namespace {

// Σ a[i] · b[i] over eight partial sums: float addition does not
// reassociate without -ffast-math, so one accumulator would serialize the
// loop; eight let the compiler keep a vector of sums.
float Dot(const float* a, const float* b, int64_t n) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int lane = 0; lane < 8; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  }
  float sum = 0;
  for (; i < n; ++i) sum += a[i] * b[i];
  for (float p : partial) sum += p;
  return sum;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace

void AddLoraUpdate(const LoraKernelWeights& weights, const float* x, const int32_t* row_ids,
                   int num_rows, float* scratch, float* y) {
  for (int n = 0; n < num_rows; ++n) {
    const int64_t row = row_ids[n];
    const float* x_row = x + row * weights.in;
    for (int k = 0; k < weights.rank; ++k) {
      scratch[k] = weights.scale * Dot(weights.a + k * weights.in, x_row, weights.in);
    }
    float* y_row = y + row * weights.out;
    for (int k = 0; k < weights.rank; ++k) {
      Axpy(scratch[k], weights.b_t + k * weights.out, weights.out, y_row);
    }
  }
}

}  // namespace pagoda::worker
