#ifndef PAGODA_WORKER_LINEAR_H_
#define PAGODA_WORKER_LINEAR_H_

// worker::Linear: one projection of the model (q/k/v, o, gate/up, down,
// lm_head) behind one interface per weight format, chosen once at load, so
// the forward pass never branches on a format (docs/extension-points.md).
// DenseLinear is the f32/f16/bf16 weight of today, run by Backend::Linear.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/dtype.h"
#include "worker/backend.h"

namespace pagoda::worker {

class Linear {
 public:
  virtual ~Linear() = default;
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  // Bytes of backend memory the weights (and scales, zero points) take.
  virtual size_t weight_bytes() const = 0;
  // y[rows, out] = x[rows, in] · Wᵀ (+ bias), x and y of the backend's
  // activation dtype (f32 logits for lm_head), accumulating in f32.
  virtual void Forward(const void* x, int rows, void* y) = 0;
};

// A dense weight [out, in] in backend memory (its stored dtype), an optional
// f32 bias [out], and the dtype y is written in.
class DenseLinear final : public Linear {
 public:
  // `backend` must outlive the Linear. REQUIRES: weight is [out, in];
  // bias null or f32 of out elements.
  DenseLinear(Backend* backend, std::unique_ptr<Buffer> weight, int64_t out, int64_t in,
              std::unique_ptr<Buffer> bias, DType y_dtype);
  // A Linear over a weight another part of the model owns (the tied
  // lm_head reads the embedding table). `weight` must outlive it.
  DenseLinear(Backend* backend, const Buffer& weight, int64_t out, int64_t in, DType y_dtype);
  // Over a [out, in] view of such a weight (a vocabulary-parallel tied
  // lm_head reads its rank's rows of the embedding table).
  DenseLinear(Backend* backend, const Tensor& weight, DType y_dtype);

  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  // Owned weight and bias only: a borrowed weight is counted by its owner.
  size_t weight_bytes() const override;
  void Forward(const void* x, int rows, void* y) override;

 private:
  Backend* backend_;
  std::unique_ptr<Buffer> owned_weight_;
  std::unique_ptr<Buffer> bias_;
  Tensor weight_;
  int64_t out_;
  int64_t in_;
  DType y_dtype_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LINEAR_H_
