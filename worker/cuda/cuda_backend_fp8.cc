// CudaBackend's FP8 W8A8 linears: the row quantization, cuBLASLt's E4M3
// GEMM and the output scaling (kernels/ops/fp8_linear.h), chunked over rows
// so that one fixed scratch serves any batch.

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/ops/fp8_linear.h"
#include "kernels/ops/gemm.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_backend_impl.h"
#include "worker/cuda/cuda_fp8_linear.h"

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

}  // namespace

absl::StatusOr<std::unique_ptr<worker::Linear>> CudaBackend::CreateQuantizedLinear(
    QuantizedWeight weight) {
  if (weight.code_type != CodeType::kFloat8E4M3) {
    return Backend::CreateQuantizedLinear(std::move(weight));
  }
  return CreateCudaFp8Linear(this, std::move(weight));
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
  uint8_t* codes = impl_->fp8_scratch.get();
  float* row_scales = reinterpret_cast<float*>(codes + AlignUp(chunk * w.in));
  float* product = reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(row_scales) +
                                            AlignUp(chunk * sizeof(float)));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t count = std::min<int64_t>(chunk, rows - r0);
    kernels::QuantizeFp8RowsParams quantize;
    quantize.x = static_cast<const uint8_t*>(x) + r0 * w.in * elem;
    quantize.x_row_stride = w.in;
    quantize.dtype = activation_dtype_;
    quantize.rows = count;
    quantize.cols = w.in;
    quantize.scaling =
        w.static_input ? kernels::Fp8InputScaling::kStatic : kernels::Fp8InputScaling::kPerToken;
    quantize.static_scale = w.input_scale;
    quantize.codes = codes;
    quantize.scales = row_scales;
    if (!Check(kernels::LaunchQuantizeFp8Rows(quantize, stream_), "FP8 input quantization")) {
      return;
    }
    // The GEMM's rows padded to its multiple with zero codes (their products
    // are never read).
    const int64_t padded = RoundUpToFp8GemmRows(count);
    if (padded > count &&
        !Check(cudaMemsetAsync(codes + count * w.in, 0, (padded - count) * w.in, stream_),
               "FP8 row padding")) {
      return;
    }
    const cublasStatus_t status = kernels::Gemm(*impl_->gemm,
                                                kernels::GemmParams{.a = codes,
                                                                    .w = w.codes,
                                                                    .c = product,
                                                                    .m = padded,
                                                                    .n = w.out,
                                                                    .k = w.in,
                                                                    .dtype = DType::kFp8E4M3,
                                                                    .out_dtype = DType::kF32},
                                                stream_);
    if (status != CUBLAS_STATUS_SUCCESS) {
      Fail(absl::InternalError(absl::StrCat("FP8 GEMM [", padded, " x ", w.in, "] x [", w.out,
                                            " x ", w.in, "]^T: ", cublasLtGetStatusName(status))));
      return;
    }
    kernels::ScaleFp8OutputParams scale;
    scale.acc = product;
    scale.row_scales = row_scales;
    scale.col_scales = w.scales;
    scale.bias = w.bias;
    scale.y = static_cast<uint8_t*>(y) + r0 * w.out * elem;
    scale.y_row_stride = w.out;
    scale.dtype = activation_dtype_;
    scale.rows = count;
    scale.cols = w.out;
    if (!Check(kernels::LaunchScaleFp8Output(scale, stream_), "FP8 output scaling")) return;
  }
}

}  // namespace pagoda::worker
