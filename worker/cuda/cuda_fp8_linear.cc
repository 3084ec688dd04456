#include "worker/cuda/cuda_fp8_linear.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pagoda::worker {
namespace {

class CudaFp8Linear final : public Linear {
 public:
  CudaFp8Linear(CudaBackend* backend, std::unique_ptr<Buffer> codes, std::unique_ptr<Buffer> scales,
                std::unique_ptr<Buffer> bias, const QuantizedWeight& weight)
      : backend_(backend),
        codes_(std::move(codes)),
        scales_(std::move(scales)),
        bias_(std::move(bias)) {
    weights_.codes = static_cast<const uint8_t*>(codes_->raw());
    weights_.scales = static_cast<const float*>(scales_->data());
    weights_.bias = bias_ != nullptr ? static_cast<const float*>(bias_->data()) : nullptr;
    weights_.out = weight.out_features;
    weights_.in = weight.in_features;
    weights_.static_input = weight.input_quant == InputQuant::kFp8Static;
    weights_.input_scale = weight.input_scale;
  }

  int64_t in_features() const override { return weights_.in; }
  int64_t out_features() const override { return weights_.out; }
  size_t weight_bytes() const override {
    return codes_->nbytes() + scales_->nbytes() + (bias_ != nullptr ? bias_->nbytes() : 0);
  }
  void Forward(const void* x, int rows, void* y) override {
    backend_->Fp8Linear(weights_, x, rows, y);
  }

 private:
  CudaBackend* backend_;
  std::unique_ptr<Buffer> codes_;
  std::unique_ptr<Buffer> scales_;
  std::unique_ptr<Buffer> bias_;
  CudaBackend::Fp8Weights weights_;
};

// What the device path cannot run, in one line naming the module.
absl::Status CheckFp8LinearServedOnCuda(const QuantizedWeight& w) {
  if (w.input_quant != InputQuant::kFp8PerToken && w.input_quant != InputQuant::kFp8Static) {
    return absl::UnimplementedError(
        absl::StrCat(w.name,
                     ": FP8 weights without FP8 input quantization (W8A16) are not served on CUDA "
                     "yet (the CPU worker serves them)"));
  }
  if (w.num_groups != 1 || w.scales.size() != static_cast<size_t>(w.out_features)) {
    return absl::UnimplementedError(absl::StrCat(w.name, ": FP8 weight scales in ", w.num_groups,
                                                 " groups a row are not served on CUDA (one "
                                                 "scale a row or a tensor is)"));
  }
  if (w.in_features % 16 != 0 || w.out_features % 16 != 0) {
    return absl::UnimplementedError(absl::StrCat(
        w.name, ": FP8 weight [", w.out_features, ", ", w.in_features,
        "] is not served on CUDA (cuBLASLt's FP8 GEMM needs both sizes multiples of 16)"));
  }
  // 16 rows (the GEMM's row multiple) of codes, scales and f32 product must
  // fit the backend's FP8 scratch: out below about a million features.
  if (16 * (w.in_features + 4 + 4 * w.out_features) + 1024 >
      static_cast<int64_t>(CudaBackend::kFp8ScratchBytes)) {
    return absl::UnimplementedError(absl::StrCat(w.name, ": FP8 weight [", w.out_features, ", ",
                                                 w.in_features,
                                                 "] is too large for the CUDA FP8 scratch"));
  }
  if (w.input_quant == InputQuant::kFp8Static &&
      !(std::isfinite(w.input_scale) && w.input_scale > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(w.name, ": input_scale ", w.input_scale, " is not finite and positive"));
  }
  return absl::OkStatus();
}

// A device copy of `bytes` from `host`, in a buffer of `count` `dtype`
// elements.
std::unique_ptr<Buffer> UploadFp8LinearArray(CudaBackend* backend, DType dtype, size_t count,
                                             const void* host) {
  std::unique_ptr<Buffer> buffer = backend->Allocate(dtype, count);
  backend->UploadBytes(host, buffer->raw(), count * DTypeSize(dtype));
  return buffer;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Linear>> CreateCudaFp8Linear(CudaBackend* backend,
                                                            QuantizedWeight weight) {
  if (absl::Status served = CheckFp8LinearServedOnCuda(weight); !served.ok()) return served;
  // The codes are bytes: the one-byte E4M3 DType sizes their buffer.
  auto codes =
      UploadFp8LinearArray(backend, DType::kFp8E4M3, weight.codes.size(), weight.codes.data());
  auto scales =
      UploadFp8LinearArray(backend, DType::kF32, weight.scales.size(), weight.scales.data());
  std::unique_ptr<Buffer> bias;
  if (!weight.bias.empty()) {
    bias = UploadFp8LinearArray(backend, DType::kF32, weight.bias.size(), weight.bias.data());
  }
  backend->ReserveFp8Scratch();
  if (!backend->status().ok()) return backend->status();
  return std::make_unique<CudaFp8Linear>(backend, std::move(codes), std::move(scales),
                                         std::move(bias), weight);
}

}  // namespace pagoda::worker
