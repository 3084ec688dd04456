#include "worker/cuda/cuda_int_linear.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/ops/int_weight_pack.h"
#include "kernels/ops/w8a8_int8.h"

namespace pagoda::worker {
namespace {

class CudaIntLinear final : public Linear {
 public:
  CudaIntLinear(CudaBackend* backend, std::unique_ptr<Buffer> codes,
                std::unique_ptr<Buffer> scale_zero, std::unique_ptr<Buffer> perm,
                std::unique_ptr<Buffer> bias, std::unique_ptr<Buffer> w8a8_scales,
                const CudaBackend::IntWeights& weights)
      : backend_(backend),
        codes_(std::move(codes)),
        scale_zero_(std::move(scale_zero)),
        perm_(std::move(perm)),
        bias_(std::move(bias)),
        w8a8_scales_(std::move(w8a8_scales)),
        weights_(weights) {
    weights_.w8a8_scales =
        w8a8_scales_ != nullptr ? static_cast<const float*>(w8a8_scales_->data()) : nullptr;
    weights_.packed.codes = static_cast<const uint32_t*>(codes_->raw());
    weights_.packed.scale_zero = static_cast<const float2*>(scale_zero_->raw());
    weights_.packed.perm = perm_ != nullptr ? static_cast<const int32_t*>(perm_->raw()) : nullptr;
    weights_.bias = bias_ != nullptr ? static_cast<const float*>(bias_->data()) : nullptr;
  }

  int64_t in_features() const override { return weights_.packed.in; }
  int64_t out_features() const override { return weights_.packed.out; }
  size_t weight_bytes() const override {
    size_t bytes = codes_->nbytes() + scale_zero_->nbytes();
    if (perm_ != nullptr) bytes += perm_->nbytes();
    if (bias_ != nullptr) bytes += bias_->nbytes();
    if (w8a8_scales_ != nullptr) bytes += w8a8_scales_->nbytes();
    return bytes;
  }
  void Forward(const void* x, int rows, void* y) override {
    backend_->IntLinear(weights_, x, rows, y);
  }

 private:
  CudaBackend* backend_;
  std::unique_ptr<Buffer> codes_;
  std::unique_ptr<Buffer> scale_zero_;
  std::unique_ptr<Buffer> perm_;
  std::unique_ptr<Buffer> bias_;
  std::unique_ptr<Buffer> w8a8_scales_;
  CudaBackend::IntWeights weights_;
};

// A device copy of `count` `dtype` elements from `host`.
std::unique_ptr<Buffer> UploadIntLinearArray(CudaBackend* backend, DType dtype, size_t count,
                                             const void* host) {
  std::unique_ptr<Buffer> buffer = backend->Allocate(dtype, count);
  backend->UploadBytes(host, buffer->raw(), count * DTypeSize(dtype));
  return buffer;
}

// W8A8 (int8 inputs per token) needs one weight scale a row; no other
// input quantization has integer weight codes.
absl::Status CheckIntInputsServedOnCuda(const QuantizedWeight& w) {
  if (w.input_quant == InputQuant::kNone) return absl::OkStatus();
  if (w.input_quant != InputQuant::kInt8PerToken) {
    return absl::UnimplementedError(
        absl::StrCat(w.name, ": integer weight codes with FP8 inputs are not served on CUDA"));
  }
  if (w.num_groups != 1 || w.scales.size() != static_cast<size_t>(w.out_features)) {
    return absl::UnimplementedError(absl::StrCat(w.name, ": W8A8 weight scales in ", w.num_groups,
                                                 " groups a row are not served on CUDA"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Linear>> CreateCudaIntLinear(CudaBackend* backend,
                                                            QuantizedWeight weight) {
  if (absl::Status served = CheckIntInputsServedOnCuda(weight); !served.ok()) return served;
  const bool w8a8 = weight.input_quant == InputQuant::kInt8PerToken;
  std::string error;
  kernels::HostPackedIntWeight packed = kernels::PackIntWeight(
      kernels::UnpackedIntWeight{.bits = weight.bits,
                                 .out = weight.out_features,
                                 .in = weight.in_features,
                                 .num_groups = weight.num_groups,
                                 .codes = weight.codes.data(),
                                 .scales = weight.scales.data(),
                                 .zeros = weight.zeros.data(),
                                 .group_of_input = weight.group_of_input.data()},
      &error);
  if (!error.empty()) {
    return absl::UnimplementedError(absl::StrCat(weight.name, ": ", weight.format, " int",
                                                 weight.bits, " weight is not served on CUDA (",
                                                 error, ")"));
  }
  // W8A8 dequantizes to q - zero (exact in the activation dtype); s_w
  // scales the product instead.
  std::unique_ptr<Buffer> w8a8_scales;
  // An 8-bit W8A8 weight in input order is stored sign-flipped, as the int8
  // matrix cuBLASLt's integer GEMM reads (kernels/ops/w8a8_int8.h).
  const bool signed_codes = w8a8 && weight.bits == 8 && packed.perm.empty();
  if (w8a8) {
    for (size_t k = 0; k < packed.scale_zero.size(); k += 2) packed.scale_zero[k] = 1.0f;
    w8a8_scales =
        UploadIntLinearArray(backend, DType::kF32, weight.scales.size(), weight.scales.data());
  }
  if (signed_codes) {
    for (uint32_t& word : packed.codes) word ^= kernels::kInt8SignFlip;
  }
  // Words and (scale, zero) pairs are 4-byte elements: f32 sizes their buffers.
  auto codes = UploadIntLinearArray(backend, DType::kF32, packed.codes.size(), packed.codes.data());
  auto scale_zero = UploadIntLinearArray(backend, DType::kF32, packed.scale_zero.size(),
                                         packed.scale_zero.data());
  std::unique_ptr<Buffer> perm, bias;
  if (!packed.perm.empty()) {
    perm = UploadIntLinearArray(backend, DType::kF32, packed.perm.size(), packed.perm.data());
  }
  if (!weight.bias.empty()) {
    bias = UploadIntLinearArray(backend, DType::kF32, weight.bias.size(), weight.bias.data());
  }
  backend->ReserveIntScratch(CudaBackend::IntScratchBytes(weight.out_features, weight.in_features,
                                                          backend->activation_dtype(), w8a8));
  if (!backend->status().ok()) return backend->status();
  CudaBackend::IntWeights weights;
  weights.packed = kernels::PackedIntWeight{.bits = weight.bits,
                                            .out = weight.out_features,
                                            .in = weight.in_features,
                                            .words_per_row = packed.words_per_row,
                                            .group_size = packed.group_size,
                                            .runs = packed.runs,
                                            .code_xor = signed_codes ? kernels::kInt8SignFlip : 0};
  return std::make_unique<CudaIntLinear>(backend, std::move(codes), std::move(scale_zero),
                                         std::move(perm), std::move(bias), std::move(w8a8_scales),
                                         weights);
}

}  // namespace pagoda::worker
