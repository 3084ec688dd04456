#ifndef PAGODA_KERNELS_OPS_DISPATCH_CUH_
#define PAGODA_KERNELS_OPS_DISPATCH_CUH_

// Turns runtime element types into compile-time ones, for the .cu files only.
// Anything not listed fails loudly with cudaErrorInvalidValue instead of
// silently running the wrong instantiation.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/float_conversion.cuh"
#include "kernels/scalar_type.h"

namespace pagoda::kernels {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls body(TypeTag<T>{}) for the C++ type of `type` and returns its result.
template <typename Body>
cudaError_t DispatchScalarType(ScalarType type, Body&& body) {
  switch (type) {
    case ScalarType::kF32:
      return body(TypeTag<float>{});
    case ScalarType::kF16:
      return body(TypeTag<__half>{});
    case ScalarType::kBF16:
      return body(TypeTag<__nv_bfloat16>{});
    case ScalarType::kFp8E4M3:  // KV-cache-only: no CUDA kernel reads them yet.
    case ScalarType::kFp8E5M2:
      return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

// Sum of `value` over the whole thread block; every thread gets the result.
// REQUIRES: blockDim.x is a multiple of 32 and at most 1024; all threads call.
// The reduction order is fixed, so the result is the same on every run.
__device__ __forceinline__ float BlockSum(float value) {
  __shared__ float warp_sums[32];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();  // warp_sums may still be read by a previous call.
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  value = lane < num_warps ? warp_sums[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_DISPATCH_CUH_
