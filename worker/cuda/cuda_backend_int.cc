// CudaBackend's int4/int8 linears (kernels/ops/int_linear.h). Weight-only:
// the GEMV for decode-sized row counts, the dequantized weight and the dense
// GEMM for more. W8A8: int8 input codes, cuBLASLt's int8 GEMM of the codes
// and the sign-flipped weight bytes with the int32 epilogue
// (kernels/ops/w8a8_int8.h); where cuBLASLt declines, the GEMM of the codes
// and the weight's q - zero in f32, the output scaled by s_x * s_w.

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/ops/fp8_linear.h"
#include "kernels/ops/scaled_gemm.h"
#include "kernels/ops/w8a8_int8.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_backend_impl.h"

namespace pagoda::worker {

using cuda_backend_internal::AlignUp;

namespace {

// Where a W8A8 call's dequantized q - zero, one chunk's input codes, their
// scales and the chunk's f32 product lie in the int scratch.
struct W8A8Scratch {
  uint8_t* weight = nullptr;  // [out, in] of the activation dtype
  uint8_t* codes = nullptr;   // [chunk, in] of the activation dtype
  float* row_scales = nullptr;
  float* product = nullptr;  // [chunk, out]
};

W8A8Scratch CarveW8A8Scratch(uint8_t* base, int64_t out, int64_t in, size_t elem) {
  W8A8Scratch s;
  const int64_t chunk = CudaBackend::kW8A8ChunkRows;
  s.weight = base;
  s.codes = s.weight + AlignUp(out * in * elem);
  s.row_scales = reinterpret_cast<float*>(s.codes + AlignUp(chunk * in * elem));
  s.product = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(s.row_scales) +
                                       AlignUp(chunk * sizeof(float)));
  return s;
}

// Where a W8A8 chunk on the tensor cores (kernels/ops/w8a8_int8.h) keeps
// its int8 codes, scales, code sums and int32 product in the int scratch
// (well inside W8A8Scratch's bytes: no dequantized weight).
struct W8A8Int8Scratch {
  int8_t* codes = nullptr;  // [chunk, ld]
  float* row_scales = nullptr;
  int32_t* row_sums = nullptr;
  int32_t* product = nullptr;  // [chunk, out]
};

W8A8Int8Scratch CarveW8A8Int8Scratch(uint8_t* base, int64_t ld) {
  const int64_t chunk = CudaBackend::kW8A8ChunkRows;
  W8A8Int8Scratch s;
  s.codes = reinterpret_cast<int8_t*>(base);
  s.row_scales = reinterpret_cast<float*>(base + AlignUp(chunk * ld));
  s.row_sums = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(s.row_scales) +
                                          AlignUp(chunk * sizeof(float)));
  s.product = reinterpret_cast<int32_t*>(reinterpret_cast<uint8_t*>(s.row_sums) +
                                         AlignUp(chunk * sizeof(int32_t)));
  return s;
}

int64_t RoundUpToScaledGemm(int64_t n) {
  return (n + kernels::kScaledGemmMultiple - 1) / kernels::kScaledGemmMultiple *
         kernels::kScaledGemmMultiple;
}

}  // namespace

// One chunk of a sign-flipped W8A8 weight on the tensor cores: int8 codes,
// cuBLASLt's int8 GEMM, the int32 epilogue. NOT_SUPPORTED when cuBLASLt
// declines the shape (y untouched; only the scratch's codes may have been
// written): the caller takes the float path.
cublasStatus_t CudaBackend::W8A8Int8Chunk(const IntWeights& w, const void* x, int64_t count,
                                          void* y) {
  const kernels::PackedIntWeight& packed = w.packed;
  const int64_t ld = packed.words_per_row * 4;
  const int64_t padded = RoundUpToScaledGemm(count);
  const W8A8Int8Scratch scratch = CarveW8A8Int8Scratch(impl_->int_scratch.get(), ld);
  if (packed.out % kernels::kScaledGemmMultiple != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const kernels::QuantizeInt8CodesParams quantize{.x = x,
                                                  .dtype = activation_dtype_,
                                                  .rows = count,
                                                  .cols = packed.in,
                                                  .codes = scratch.codes,
                                                  .ld = ld,
                                                  .padded_rows = padded,
                                                  .scales = scratch.row_scales,
                                                  .row_sums = scratch.row_sums};
  if (!Check(kernels::LaunchQuantizeInt8Codes(quantize, stream_), "W8A8 int8 input codes")) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const kernels::Int8GemmParams product{.a = scratch.codes,
                                        .w = reinterpret_cast<const int8_t*>(packed.codes),
                                        .c = scratch.product,
                                        .m = padded,
                                        .n = packed.out,
                                        .k = ld};
  const cublasStatus_t status = kernels::Int8Gemm(*impl_->gemm, product, stream_);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  kernels::ScaleInt32OutputParams scale;
  scale.acc = scratch.product;
  scale.row_sums = scratch.row_sums;
  scale.row_scales = scratch.row_scales;
  scale.col_scale_zero = packed.scale_zero;
  scale.col_scales = w.w8a8_scales;
  scale.bias = w.bias;
  scale.y = y;
  scale.y_row_stride = packed.out;
  scale.dtype = activation_dtype_;
  scale.rows = count;
  scale.cols = packed.out;
  if (!Check(kernels::LaunchScaleInt32Output(scale, stream_), "W8A8 int32 output scaling")) {
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

size_t CudaBackend::IntScratchBytes(int64_t out, int64_t in, DType dtype, bool w8a8) {
  const size_t elem = DTypeSize(dtype);
  if (!w8a8) return std::max<int64_t>(out, kernels::kIntGemvMaxRows) * in * elem;
  return AlignUp(out * in * elem) + AlignUp(kW8A8ChunkRows * in * elem) +
         AlignUp(kW8A8ChunkRows * sizeof(float)) + kW8A8ChunkRows * out * sizeof(float);
}

void CudaBackend::W8A8IntLinear(const IntWeights& w, const void* x, int rows, void* y) {
  const kernels::PackedIntWeight& packed = w.packed;
  const size_t elem = DTypeSize(activation_dtype_);
  if (packed.code_xor == kernels::kInt8SignFlip) {
    const cublasStatus_t first = W8A8Int8Chunk(w, x, std::min<int64_t>(kW8A8ChunkRows, rows), y);
    if (first != CUBLAS_STATUS_NOT_SUPPORTED) {  // else the float path below
      if (first != CUBLAS_STATUS_SUCCESS) return W8A8GemmFailed(first);
      for (int64_t r0 = kW8A8ChunkRows; r0 < rows; r0 += kW8A8ChunkRows) {
        const cublasStatus_t status =
            W8A8Int8Chunk(w, static_cast<const uint8_t*>(x) + r0 * packed.in * elem,
                          std::min<int64_t>(kW8A8ChunkRows, rows - r0),
                          static_cast<uint8_t*>(y) + r0 * packed.out * elem);
        if (status != CUBLAS_STATUS_SUCCESS) return W8A8GemmFailed(status);
      }
      return;
    }
  }
  const W8A8Scratch scratch =
      CarveW8A8Scratch(impl_->int_scratch.get(), packed.out, packed.in, elem);
  if (!Check(kernels::LaunchDequantizeIntWeight(packed, activation_dtype_, scratch.weight, stream_),
             "W8A8 weight codes")) {
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += kW8A8ChunkRows) {
    const int64_t count = std::min<int64_t>(kW8A8ChunkRows, rows - r0);
    const kernels::QuantizeInt8RowsParams quantize{
        .x = static_cast<const uint8_t*>(x) + r0 * packed.in * elem,
        .dtype = activation_dtype_,
        .rows = count,
        .cols = packed.in,
        .codes = scratch.codes,
        .scales = scratch.row_scales};
    if (!Check(kernels::LaunchQuantizeInt8Rows(quantize, stream_), "W8A8 input quantization")) {
      return;
    }
    const cublasStatus_t product = kernels::Gemm(*impl_->gemm,
                                                 kernels::GemmParams{.a = scratch.codes,
                                                                     .w = scratch.weight,
                                                                     .c = scratch.product,
                                                                     .m = count,
                                                                     .n = packed.out,
                                                                     .k = packed.in,
                                                                     .dtype = activation_dtype_,
                                                                     .out_dtype = DType::kF32},
                                                 stream_);
    if (product != CUBLAS_STATUS_SUCCESS) return W8A8GemmFailed(product);
    kernels::ScaleFp8OutputParams scale;
    scale.acc = scratch.product;
    scale.row_scales = scratch.row_scales;
    scale.col_scales = w.w8a8_scales;
    scale.bias = w.bias;
    scale.y = static_cast<uint8_t*>(y) + r0 * packed.out * elem;
    scale.y_row_stride = packed.out;
    scale.dtype = activation_dtype_;
    scale.rows = count;
    scale.cols = packed.out;
    if (!Check(kernels::LaunchScaleFp8Output(scale, stream_), "W8A8 output scaling")) return;
  }
}

void CudaBackend::W8A8GemmFailed(cublasStatus_t status) {
  if (status == CUBLAS_STATUS_EXECUTION_FAILED && !status_.ok()) return;  // Check failed already
  Fail(absl::InternalError(absl::StrCat("W8A8 GEMM: ", cublasLtGetStatusName(status))));
}

void CudaBackend::ReserveIntScratch(size_t bytes) {
  if (mode_ == LaunchMode::kCapture) return;
  Check(impl_->int_scratch.Reserve(bytes), "int linear scratch");
}

void CudaBackend::IntLinear(const IntWeights& w, const void* x, int rows, void* y) {
  if (SkipLaunch() || rows <= 0) return;
  const kernels::PackedIntWeight& packed = w.packed;
  const size_t elem = DTypeSize(activation_dtype_);
  const size_t needed =
      w.w8a8_scales != nullptr
          ? IntScratchBytes(packed.out, packed.in, activation_dtype_, true)
          : static_cast<size_t>(rows <= kernels::kIntGemvMaxRows ? rows : packed.out) * packed.in *
                elem;
  if (impl_->int_scratch.bytes() < needed) {
    Fail(absl::InternalError("int linear scratch missing: ReserveIntScratch runs at load"));
    return;
  }
  if (w.w8a8_scales != nullptr) {
    W8A8IntLinear(w, x, rows, y);
    return;
  }
  void* scratch = impl_->int_scratch.get();
  if (rows > kernels::kIntGemvMaxRows) {
    if (!Check(kernels::LaunchDequantizeIntWeight(packed, activation_dtype_, scratch, stream_),
               "int weight dequantization")) {
      return;
    }
    Tensor dequantized;
    dequantized.dtype = activation_dtype_;
    dequantized.shape = {packed.out, packed.in, 0, 0};
    dequantized.rank = 2;
    dequantized.data = scratch;
    Linear(x, rows, dequantized, w.bias, y, activation_dtype_);
    return;
  }
  const void* inputs = x;
  if (packed.perm != nullptr) {
    if (!Check(kernels::LaunchPermuteIntInputs(x, packed.perm, rows, packed.in, activation_dtype_,
                                               scratch, stream_),
               "act-order input gather")) {
      return;
    }
    inputs = scratch;
  }
  Check(kernels::LaunchIntGemv(kernels::IntGemvParams{.weight = packed,
                                                      .x = inputs,
                                                      .bias = w.bias,
                                                      .y = y,
                                                      .dtype = activation_dtype_,
                                                      .rows = rows},
                               stream_),
        "int GEMV");
}

}  // namespace pagoda::worker
