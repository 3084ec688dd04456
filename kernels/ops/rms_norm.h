#ifndef PAGODA_KERNELS_OPS_RMS_NORM_H_
#define PAGODA_KERNELS_OPS_RMS_NORM_H_

// RMSNorm as Llama uses it: out = x / sqrt(mean(x^2) + eps) * weight, computed
// in float whatever the storage type. Stateless launchers; callers own buffers.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

struct RmsNormParams {
  // [num_tokens, hidden], row t at input + t * input_stride elements.
  const void* input = nullptr;
  int64_t input_stride = 0;
  const void* weight = nullptr;  // [hidden], same dtype
  // [num_tokens, hidden], contiguous. May alias input only when input_stride
  // == hidden (else block t writes rows other blocks still read).
  void* out = nullptr;
  int num_tokens = 0;
  int hidden = 0;
  float epsilon = 1e-6f;
  ScalarType dtype = ScalarType::kBF16;
};
cudaError_t LaunchRmsNorm(const RmsNormParams& params, cudaStream_t stream);

// vLLM's fused_add_rms_norm:
//   residual <- input + residual          (rounded to dtype)
//   out      <- RMSNorm(residual) * weight
// so one kernel replaces "add the block's output to the stream, then norm".
// With out null (or == input) the norm is written over input, in place;
// with a separate out, input is only read (the decoder layer's add + norm
// then needs no copy of its input first).
struct FusedAddRmsNormParams {
  void* input = nullptr;     // [num_tokens, hidden], contiguous
  void* residual = nullptr;  // [num_tokens, hidden], contiguous
  const void* weight = nullptr;
  int num_tokens = 0;
  int hidden = 0;
  float epsilon = 1e-6f;
  ScalarType dtype = ScalarType::kBF16;
  // [num_tokens, hidden], contiguous, or null. REQUIRES: not residual, and
  // not overlapping input unless equal to it.
  void* out = nullptr;
};
cudaError_t LaunchFusedAddRmsNorm(const FusedAddRmsNormParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_RMS_NORM_H_
