#ifndef PAGODA_KERNELS_OPS_FP8_LINEAR_H_
#define PAGODA_KERNELS_OPS_FP8_LINEAR_H_

// The two element-wise halves of an FP8 W8A8 linear on the device, around
// its FP8 GEMM (kernels/ops/gemm.h with dtype kFp8E4M3, an f32 product):
// the quantization of the activations to E4M3 codes, and the scaling of the
// product into the output. The rule is the CPU worker's
// (worker/cpu/w8a8_linear.cc) and vLLM's:
//   s_x[r]  = max(max_i |x[r, i]| / 448, 1 / (448 * 512))   per token
//           = input_scale                                     static
//   q[r, i] = E4M3(x[r, i] / s_x[r])   (f32 division, nearest even, saturated)
//   acc[r, o] = sum_i value(q[r, i]) * value(w[o, i])        (the GEMM, f32)
//   y[r, o] = acc[r, o] * (s_x[r] * s_w[o]) + bias[o]
// A NaN or infinite input row makes its s_x NaN (its outputs NaN), as on the
// CPU.
//
// Thread safety: launchers are stateless; they enqueue work on `stream`.
// Callers own every buffer until the stream has run past the work.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// 1 / (448 * 512): vLLM's smallest per-token FP8 scale (an all-zero row
// still divides), the CPU's kMinFp8TokenScale.
inline constexpr float kMinFp8TokenScale = 1.0f / (448.0f * 512.0f);

enum class Fp8InputScaling { kPerToken, kStatic };

struct QuantizeFp8RowsParams {
  const void* x = nullptr;  // [rows, cols], row r at x + r * x_row_stride elements
  int64_t x_row_stride = 0;
  ScalarType dtype = ScalarType::kBF16;  // of x: f32, f16 or bf16
  int64_t rows = 0;
  int64_t cols = 0;
  Fp8InputScaling scaling = Fp8InputScaling::kPerToken;
  float static_scale = 1.0f;  // kStatic's input_scale: finite, positive
  uint8_t* codes = nullptr;   // [rows, cols], contiguous
  float* scales = nullptr;    // [rows]: s_x
};
// One thread block per row. cudaErrorInvalidValue for a null buffer, a
// negative size, a dtype other than f32/f16/bf16 or a bad static scale.
cudaError_t LaunchQuantizeFp8Rows(const QuantizeFp8RowsParams& params, cudaStream_t stream);

struct ScaleFp8OutputParams {
  const float* acc = nullptr;         // [rows, cols]: the FP8 GEMM's product
  const float* row_scales = nullptr;  // [rows]: s_x
  const float* col_scales = nullptr;  // [cols]: s_w
  const float* bias = nullptr;        // [cols], or null
  void* y = nullptr;                  // [rows, cols] of dtype, row r at y + r * y_row_stride
  int64_t y_row_stride = 0;
  ScalarType dtype = ScalarType::kBF16;  // f32, f16 or bf16 (rounded to nearest even)
  int64_t rows = 0;
  int64_t cols = 0;
};
cudaError_t LaunchScaleFp8Output(const ScaleFp8OutputParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_FP8_LINEAR_H_
