#ifndef PAGODA_KERNELS_OPS_INT_LINEAR_H_
#define PAGODA_KERNELS_OPS_INT_LINEAR_H_

// The device half of a weight-only int4/int8 linear (W4A16/W8A16: AWQ,
// GPTQ with or without act-order, compressed-tensors pack-quantized): the
// weight's one device layout (PackedIntWeight, packed on the host by
// kernels/ops/int_weight_pack.h) and its three kernels:
// - LaunchIntGemv: decode (up to kIntGemvMaxRows rows), one warp per output
//   feature, 16-byte loads of packed codes, dequantized in registers and
//   accumulated in f32;
// - LaunchDequantizeIntWeight: prefill, the whole weight to the activation
//   dtype in the caller's scratch, in the checkpoint's input order, for the
//   dense GEMM (kernels/ops/gemm.h);
// - LaunchPermuteIntInputs: an act-order weight's decode inputs gathered
//   into its sorted input order before the GEMV.
// The weight a code stands for is W[o, i] = (q - zero[o, g]) * scale[o, g]
// (worker/quant/quantized_weight.h's rule).
//
// Thread safety: launchers are stateless; they enqueue work on `stream`.
// Callers own every buffer until the stream has run past the work.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// Rows one GEMV launch takes (its per-row accumulators live in registers).
inline constexpr int kIntGemvMaxRows = 8;

// A packed int4/int8 weight on the device. Inputs are stored in "sorted"
// order j (by group, stable): sorted input j is the checkpoint's input
// perm[j] (perm null: the identity) and lies in group run j / group_size.
// Each output row holds words_per_row uint32 words (a multiple of 4, so a
// row is whole 16-byte vectors): sorted input j is bits [b*(j%c), b*(j%c+1))
// of word j / c, c = 32 / b codes a word; codes past `in` are zero.
struct PackedIntWeight {
  const uint32_t* codes = nullptr;     // [out, words_per_row]
  const float2* scale_zero = nullptr;  // [out, runs]: (scale, zero point), zero integral
  const int32_t* perm = nullptr;       // [in], or null
  int bits = 4;                        // 4 or 8
  int64_t out = 0;
  int64_t in = 0;
  int64_t words_per_row = 0;
  int64_t group_size = 0;  // inputs a run (the last run may be shorter)
  int64_t runs = 0;        // ceil(in / group_size)
  // XORed into every code word before its codes are read: 0, or
  // kernels/ops/w8a8_int8.h's kInt8SignFlip for a W8A8 weight stored as
  // int8 values for cuBLASLt.
  uint32_t code_xor = 0;
};

struct IntGemvParams {
  PackedIntWeight weight;
  const void* x = nullptr;               // [rows, in], contiguous, in sorted input order
  const float* bias = nullptr;           // [out], or null
  void* y = nullptr;                     // [rows, out], contiguous
  ScalarType dtype = ScalarType::kBF16;  // of x and y: f16 or bf16
  int rows = 0;                          // 1 .. kIntGemvMaxRows
};
// cudaErrorInvalidValue for a null buffer, bad sizes or dtype.
cudaError_t LaunchIntGemv(const IntGemvParams& params, cudaStream_t stream);

// w[o, perm[j]] (or w[o, j]) = dtype((q - zero) * scale), w [out, in].
cudaError_t LaunchDequantizeIntWeight(const PackedIntWeight& weight, ScalarType dtype, void* w,
                                      cudaStream_t stream);

// Prefill through the tensor cores without a dequantized copy of the weight
// (kernels/ops/int_gemm_fused.cu): y[rows, out] = x * W^T + bias, the weight
// dequantized in registers to dtype exactly as LaunchDequantizeIntWeight
// rounds it, f32 accumulation. int4 only, group sizes a multiple of 32
// (every AWQ/GPTQ checkpoint's; a per-channel weight when in is), no
// code_xor; cudaErrorInvalidValue otherwise (the caller keeps the
// dequantize + GEMM path). x in the checkpoint's input order (perm gathers).
// Not yet on the serving path (never run on a GPU: kernels/ops/NOTES.md).
struct IntGemmParams {
  PackedIntWeight weight;
  const void* x = nullptr;               // [rows, in], contiguous
  const float* bias = nullptr;           // [out], or null
  void* y = nullptr;                     // [rows, out], contiguous
  ScalarType dtype = ScalarType::kBF16;  // of x and y: f16 or bf16
  int64_t rows = 0;                      // >= 1
};
cudaError_t LaunchFusedIntGemm(const IntGemmParams& params, cudaStream_t stream);

// W8A8 int8 (compressed-tensors int-quantized) inputs, the CPU worker's
// rule (worker/cpu/w8a8_linear.cc): per token row s = max|x| / 127,
// q = round_half_even(x / s) clamped to [-128, 127], all 0 when s is 0; a
// NaN or infinite input makes s NaN (and its row's q 0). The codes are
// written as dtype values (integers, exact in f16 and bf16), so the dense
// GEMM of the codes and the weight's q - zero (LaunchDequantizeIntWeight
// with unit scales) sums exact integer products in f32; the output scaling
// is kernels/ops/fp8_linear.h's LaunchScaleFp8Output.
struct QuantizeInt8RowsParams {
  const void* x = nullptr;               // [rows, cols], contiguous
  ScalarType dtype = ScalarType::kBF16;  // of x and codes: f16 or bf16
  int64_t rows = 0;
  int64_t cols = 0;
  void* codes = nullptr;    // [rows, cols]
  float* scales = nullptr;  // [rows]
};
cudaError_t LaunchQuantizeInt8Rows(const QuantizeInt8RowsParams& params, cudaStream_t stream);

// sorted[r, j] = x[r, perm[j]] for r < rows, both [rows, in] of dtype.
cudaError_t LaunchPermuteIntInputs(const void* x, const int32_t* perm, int64_t rows, int64_t in,
                                   ScalarType dtype, void* sorted, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_INT_LINEAR_H_
