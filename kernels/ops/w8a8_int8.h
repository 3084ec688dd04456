#ifndef PAGODA_KERNELS_OPS_W8A8_INT8_H_
#define PAGODA_KERNELS_OPS_W8A8_INT8_H_

// The element-wise halves of a W8A8 int8 linear on the tensor cores, around
// scaled_gemm.h's Int8Gemm: the activations' signed int8 codes (with each
// row's code sum) and the epilogue that turns the exact int32 product into
// the scaled output. The input rule is int_linear.h's (the CPU worker's):
// s_x = max|x| / 127 per row, q = round_half_even(x / s_x) in [-128, 127].
//
// The weight is int_linear.h's packed 8-bit layout stored sign-flipped
// (every code byte XOR 0x80, PackedIntWeight::code_xor = kInt8SignFlip):
// each byte is then the int8 value q - 128, and the packed rows (padded to
// 16 bytes with zero bytes before the flip: -128 after it) are a row-major
// int8 matrix [out, words_per_row * 4] cuBLASLt reads as it is. With the
// checkpoint's zero point z[o] (128 for compressed-tensors' signed codes),
//   sum_i x_q[r, i] * (q[o, i] - z[o])
//     = sum_i x_q[r, i] * (q[o, i] - 128) - (z[o] - 128) * sum_i x_q[r, i],
// so the GEMM of the flipped bytes plus one correction by the row's code
// sum is exact for any zero point. The activation codes past `cols` are
// zero, so the weight's padding adds nothing.
//
// Thread safety: launchers are stateless; they enqueue work on `stream`.
// Callers own every buffer until the stream has run past the work.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// PackedIntWeight::code_xor of a sign-flipped 8-bit weight.
inline constexpr uint32_t kInt8SignFlip = 0x80808080u;

struct QuantizeInt8CodesParams {
  const void* x = nullptr;               // [rows, cols], contiguous
  ScalarType dtype = ScalarType::kBF16;  // of x: f16 or bf16
  int64_t rows = 0;
  int64_t cols = 0;
  // [padded_rows, ld]: row r < rows holds its codes then zeros up to ld;
  // rows past `rows` are all zero (a GEMM's row padding).
  int8_t* codes = nullptr;
  int64_t ld = 0;               // >= cols
  int64_t padded_rows = 0;      // >= rows
  float* scales = nullptr;      // [rows]: s_x (NaN for a row with a NaN or infinity)
  int32_t* row_sums = nullptr;  // [rows]: sum of the row's codes
};
// One thread block per padded row. cudaErrorInvalidValue for null buffers,
// bad sizes or a dtype other than f16/bf16.
cudaError_t LaunchQuantizeInt8Codes(const QuantizeInt8CodesParams& params, cudaStream_t stream);

struct ScaleInt32OutputParams {
  const int32_t* acc = nullptr;       // [rows, cols] (row stride cols): Int8Gemm's product
  const int32_t* row_sums = nullptr;  // [rows]
  const float* row_scales = nullptr;  // [rows]: s_x
  // [cols] (scale, zero) pairs: the zero z[o] (integral) corrects the sign
  // flip; the scale is not read (W8A8 keeps s_w apart, below).
  const float2* col_scale_zero = nullptr;
  const float* col_scales = nullptr;  // [cols]: s_w
  const float* bias = nullptr;        // [cols], or null
  void* y = nullptr;                  // [rows, cols] of dtype, row r at y + r * y_row_stride
  int64_t y_row_stride = 0;
  ScalarType dtype = ScalarType::kBF16;  // f32, f16 or bf16
  int64_t rows = 0;
  int64_t cols = 0;
};
// y[r, o] = dtype(float(acc - (z[o] - 128) * row_sum[r]) * (s_x[r] * s_w[o])
// + bias[o]): the correction in int64 (exact), then fp8_linear.h's
// LaunchScaleFp8Output rounding order.
cudaError_t LaunchScaleInt32Output(const ScaleInt32OutputParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_W8A8_INT8_H_
