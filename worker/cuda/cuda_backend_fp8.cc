// CudaBackend's FP8 W8A8 linears: the row quantization, then cuBLASLt's
// E4M3 GEMM with both scales in its descriptor and a bf16/f16 output
// (kernels/ops/scaled_gemm.h), or where that is declined (a bias, f32
// activations, no algorithm) the E4M3 GEMM in f32 and the output scaling
// pass (kernels/ops/fp8_linear.h); chunked over rows so that one fixed
// scratch serves any batch.

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/ops/fp8_linear.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/scaled_gemm.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_backend_impl.h"
#include "worker/cuda/cuda_fp8_linear.h"
#include "worker/cuda/cuda_int_linear.h"

namespace pagoda::worker {

using cuda_backend_internal::AlignUp;

namespace {

// cuBLASLt's FP8 GEMM takes row counts in multiples of this (gemm.h).
constexpr int64_t kFp8GemmRowMultiple = 16;

int64_t RoundUpToFp8GemmRows(int64_t rows) {
  return (rows + kFp8GemmRowMultiple - 1) / kFp8GemmRowMultiple * kFp8GemmRowMultiple;
}

// Rows of one chunk, a multiple of kFp8GemmRowMultiple: its codes, scales
// and f32 product in `scratch_bytes`.
int64_t Fp8ChunkRows(int64_t in, int64_t out, size_t scratch_bytes) {
  const int64_t per_row = in + 4 + 4 * out;
  const int64_t rows = (static_cast<int64_t>(scratch_bytes) - 1024) / per_row;
  return std::max(kFp8GemmRowMultiple, rows / kFp8GemmRowMultiple * kFp8GemmRowMultiple);
}

// Where one chunk's quantized rows, their scales and its f32 product lie.
struct Fp8ChunkScratch {
  uint8_t* codes = nullptr;  // [chunk rows, in]
  float* row_scales = nullptr;
  float* product = nullptr;  // [chunk rows, out]
};

absl::Status CudaLaunchStatus(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

// Rows [0, count) of x quantized into the scratch, and the rows up to the
// GEMM's multiple zeroed (their products are never read).
absl::Status QuantizeFp8Chunk(const CudaBackend::Fp8Weights& w, const Fp8ChunkScratch& scratch,
                              const void* x, int64_t count, DType dtype, cudaStream_t stream) {
  kernels::QuantizeFp8RowsParams quantize;
  quantize.x = x;
  quantize.x_row_stride = w.in;
  quantize.dtype = dtype;
  quantize.rows = count;
  quantize.cols = w.in;
  quantize.scaling =
      w.static_input ? kernels::Fp8InputScaling::kStatic : kernels::Fp8InputScaling::kPerToken;
  quantize.static_scale = w.input_scale;
  quantize.codes = scratch.codes;
  quantize.scales = scratch.row_scales;
  absl::Status status =
      CudaLaunchStatus(kernels::LaunchQuantizeFp8Rows(quantize, stream), "FP8 input quantization");
  const int64_t padded = RoundUpToFp8GemmRows(count);
  if (!status.ok() || padded == count) return status;
  return CudaLaunchStatus(
      cudaMemsetAsync(scratch.codes + count * w.in, 0, (padded - count) * w.in, stream),
      "FP8 row padding");
}

// The chunk's product with both scales applied inside cuBLASLt, written in
// the activation dtype (kernels/ops/scaled_gemm.h): straight into y when
// the chunk needs no row padding, else into the scratch and its first
// `count` rows copied out. NOT_SUPPORTED (nothing enqueued) for a bias, an
// f32 activation or a problem cuBLASLt declines: then the f32 path.
cublasStatus_t Fp8ScaledChunk(const CudaBackend::Fp8Weights& w, const Fp8ChunkScratch& scratch,
                              int64_t count, void* y, DType dtype, kernels::GemmContext& gemm,
                              cudaStream_t stream) {
  if (w.bias != nullptr || (dtype != DType::kBF16 && dtype != DType::kF16)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const int64_t padded = RoundUpToFp8GemmRows(count);
  const bool direct = padded == count && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  const kernels::Fp8ScaledGemmParams product{.a = scratch.codes,
                                             .w = w.codes,
                                             .row_scales = scratch.row_scales,
                                             .col_scales = w.scales,
                                             .c = direct ? y : scratch.product,
                                             .m = padded,
                                             .n = w.out,
                                             .k = w.in,
                                             .out_dtype = dtype};
  const cublasStatus_t status = kernels::Fp8ScaledGemm(gemm, product, stream);
  if (status != CUBLAS_STATUS_SUCCESS || direct) return status;
  const size_t bytes = count * w.out * DTypeSize(dtype);
  return cudaMemcpyAsync(y, scratch.product, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

// One chunk of `count` rows: quantize, E4M3 GEMM, scale into y.
absl::Status LaunchFp8LinearChunk(const CudaBackend::Fp8Weights& w, const Fp8ChunkScratch& scratch,
                                  const void* x, int64_t count, void* y, DType dtype,
                                  kernels::GemmContext& gemm, cudaStream_t stream) {
  absl::Status status = QuantizeFp8Chunk(w, scratch, x, count, dtype, stream);
  if (!status.ok()) return status;
  const int64_t padded = RoundUpToFp8GemmRows(count);
  const cublasStatus_t scaled = Fp8ScaledChunk(w, scratch, count, y, dtype, gemm, stream);
  if (scaled == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  if (scaled != CUBLAS_STATUS_NOT_SUPPORTED) {
    return absl::InternalError(absl::StrCat("FP8 scaled GEMM [", padded, " x ", w.in, "] x [",
                                            w.out, " x ", w.in,
                                            "]^T: ", cublasLtGetStatusName(scaled)));
  }
  const cublasStatus_t product = kernels::Gemm(gemm,
                                               kernels::GemmParams{.a = scratch.codes,
                                                                   .w = w.codes,
                                                                   .c = scratch.product,
                                                                   .m = padded,
                                                                   .n = w.out,
                                                                   .k = w.in,
                                                                   .dtype = DType::kFp8E4M3,
                                                                   .out_dtype = DType::kF32},
                                               stream);
  if (product != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("FP8 GEMM [", padded, " x ", w.in, "] x [", w.out,
                                            " x ", w.in, "]^T: ", cublasLtGetStatusName(product)));
  }
  kernels::ScaleFp8OutputParams scale;
  scale.acc = scratch.product;
  scale.row_scales = scratch.row_scales;
  scale.col_scales = w.scales;
  scale.bias = w.bias;
  scale.y = y;
  scale.y_row_stride = w.out;
  scale.dtype = dtype;
  scale.rows = count;
  scale.cols = w.out;
  return CudaLaunchStatus(kernels::LaunchScaleFp8Output(scale, stream), "FP8 output scaling");
}

}  // namespace

absl::StatusOr<std::unique_ptr<worker::Linear>> CudaBackend::CreateQuantizedLinear(
    QuantizedWeight weight) {
  if (weight.code_type == CodeType::kFloat8E4M3) {
    return CreateCudaFp8Linear(this, std::move(weight));
  }
  return CreateCudaIntLinear(this, std::move(weight));
}

void CudaBackend::ReserveFp8Scratch() {
  if (mode_ == LaunchMode::kCapture) return;
  Check(impl_->fp8_scratch.Reserve(kFp8ScratchBytes), "FP8 linear scratch");
}

void CudaBackend::Fp8Linear(const Fp8Weights& w, const void* x, int rows, void* y) {
  if (SkipLaunch() || rows <= 0) return;
  if (impl_->fp8_scratch.bytes() < kFp8ScratchBytes) {
    Fail(absl::InternalError("FP8 linear scratch missing: ReserveFp8Scratch runs at load"));
    return;
  }
  const size_t elem = DTypeSize(activation_dtype_);
  const int64_t chunk = Fp8ChunkRows(w.in, w.out, impl_->fp8_scratch.bytes());
  Fp8ChunkScratch scratch;
  scratch.codes = impl_->fp8_scratch.get();
  scratch.row_scales = reinterpret_cast<float*>(scratch.codes + AlignUp(chunk * w.in));
  scratch.product = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(scratch.row_scales) +
                                             AlignUp(chunk * sizeof(float)));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    absl::Status status = LaunchFp8LinearChunk(
        w, scratch, static_cast<const uint8_t*>(x) + r0 * w.in * elem,
        std::min<int64_t>(chunk, rows - r0), static_cast<uint8_t*>(y) + r0 * w.out * elem,
        activation_dtype_, *impl_->gemm, stream_);
    if (!status.ok()) {
      Fail(std::move(status));
      return;
    }
  }
}

}  // namespace pagoda::worker
