// CudaBackend's weight-only int4/int8 linears (kernels/ops/int_linear.h):
// the GEMV for decode-sized row counts, the dequantized weight and the dense
// GEMM for more.

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_backend_impl.h"

namespace pagoda::worker {

void CudaBackend::ReserveIntScratch(size_t bytes) {
  if (mode_ == LaunchMode::kCapture) return;
  Check(impl_->int_scratch.Reserve(bytes), "int linear scratch");
}

void CudaBackend::IntLinear(const IntWeights& w, const void* x, int rows, void* y) {
  if (SkipLaunch() || rows <= 0) return;
  const kernels::PackedIntWeight& packed = w.packed;
  const size_t elem = DTypeSize(activation_dtype_);
  const size_t needed =
      static_cast<size_t>(rows <= kernels::kIntGemvMaxRows ? rows : packed.out) * packed.in * elem;
  if (impl_->int_scratch.bytes() < needed) {
    Fail(absl::InternalError("int linear scratch missing: ReserveIntScratch runs at load"));
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
