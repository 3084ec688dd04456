#ifndef PAGODA_KERNELS_OPS_ACTIVATION_H_
#define PAGODA_KERNELS_OPS_ACTIVATION_H_

// The Llama MLP's gate: out = silu(gate) * up, silu(x) = x / (1 + e^-x),
// computed in float.

#include <cuda_runtime.h>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

struct SiluAndMulParams {
  // [num_tokens, 2 * intermediate]: gate columns first, then up (the fused
  // gate_up projection's output). Contiguous.
  const void* input = nullptr;
  void* out = nullptr;  // [num_tokens, intermediate], contiguous; must not alias input
  int num_tokens = 0;
  int intermediate = 0;
  ScalarType dtype = ScalarType::kBF16;
};
cudaError_t LaunchSiluAndMul(const SiluAndMulParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_ACTIVATION_H_
