#include "worker/linear.h"

#include <utility>

namespace pagoda::worker {

DenseLinear::DenseLinear(Backend* backend, std::unique_ptr<Buffer> weight, int64_t out, int64_t in,
                         std::unique_ptr<Buffer> bias, DType y_dtype)
    : backend_(backend),
      owned_weight_(std::move(weight)),
      bias_(std::move(bias)),
      weight_(Tensor::Of(*owned_weight_, {out, in})),
      out_(out),
      in_(in),
      y_dtype_(y_dtype) {}

DenseLinear::DenseLinear(Backend* backend, const Buffer& weight, int64_t out, int64_t in,
                         DType y_dtype)
    : backend_(backend),
      weight_(Tensor::Of(weight, {out, in})),
      out_(out),
      in_(in),
      y_dtype_(y_dtype) {}

DenseLinear::DenseLinear(Backend* backend, const Tensor& weight, DType y_dtype)
    : backend_(backend),
      weight_(weight),
      out_(weight.dim(0)),
      in_(weight.dim(1)),
      y_dtype_(y_dtype) {}

size_t DenseLinear::weight_bytes() const {
  return (owned_weight_ ? owned_weight_->nbytes() : 0) + (bias_ ? bias_->nbytes() : 0);
}

void DenseLinear::Forward(const void* x, int rows, void* y) {
  backend_->Linear(x, rows, weight_, bias_ ? bias_->data() : nullptr, y, y_dtype_);
}

}  // namespace pagoda::worker
