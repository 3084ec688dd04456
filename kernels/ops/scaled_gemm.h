#ifndef PAGODA_KERNELS_OPS_SCALED_GEMM_H_
#define PAGODA_KERNELS_OPS_SCALED_GEMM_H_

// cuBLASLt GEMMs of quantized codes on the tensor cores, beside gemm.h's
// float ones and sharing its GemmContext (handle, workspace, algorithm
// cache):
// - Int8Gemm: int8 x int8 -> exact int32 sums (W8A8 int8; the scaling is
//   kernels/ops/w8a8_int8.h's epilogue kernel);
// - Fp8ScaledGemm: E4M3 x E4M3 with a scale per activation row and per
//   weight row applied inside cuBLASLt (its outer-vector scale mode), the
//   output written straight in bf16/f16: no f32 product, no scaling pass.
// Both are row-major like gemm.h: C[m, n] = A[m, k] * W[n, k]^T, the "TN"
// product cuBLASLt's integer and FP8 kernels require. A problem cuBLASLt
// declines (a shape or alignment outside the rules below, or no algorithm
// on this device and library) returns CUBLAS_STATUS_NOT_SUPPORTED without
// enqueueing anything, so callers can fall back to gemm.h's float path.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops/gemm.h"
#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// Every dimension and leading dimension a multiple of this, every pointer
// 16-byte aligned: stricter than cuBLASLt's documented integer rule
// (multiples of 4, 4-byte pointers) and equal to its FP8 one, so one check
// serves both (callers pad rows and inputs with zero codes).
inline constexpr int64_t kScaledGemmMultiple = 16;

struct Int8GemmParams {
  const int8_t* a = nullptr;  // [m, k]
  const int8_t* w = nullptr;  // [n, k]
  int32_t* c = nullptr;       // [m, n]: sum_i a[r, i] * w[o, i], exact
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};
// CUBLAS_STATUS_INVALID_VALUE for null buffers or non-positive sizes;
// CUBLAS_STATUS_NOT_SUPPORTED for what cuBLASLt declines (see above).
cublasStatus_t Int8Gemm(GemmContext& context, const Int8GemmParams& params, cudaStream_t stream);

struct Fp8ScaledGemmParams {
  const uint8_t* a = nullptr;         // [m, k] E4M3 codes
  const uint8_t* w = nullptr;         // [n, k] E4M3 codes
  const float* row_scales = nullptr;  // [m]: s_x, device
  const float* col_scales = nullptr;  // [n]: s_w, device
  void* c = nullptr;                  // [m, n] of out_dtype
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  ScalarType out_dtype = ScalarType::kBF16;  // bf16 or f16
};
// c[r, o] = out_dtype(s_x[r] * s_w[o] * sum_i a[r, i] * w[o, i]), the sum in
// f32 with the tensor cores' periodic promotion (as gemm.h's FP8 GEMM).
// Errors as Int8Gemm's.
cublasStatus_t Fp8ScaledGemm(GemmContext& context, const Fp8ScaledGemmParams& params,
                             cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_SCALED_GEMM_H_
