#ifndef PAGODA_KERNELS_FLOAT_CONVERSION_CUH_
#define PAGODA_KERNELS_FLOAT_CONVERSION_CUH_

// Element loads and stores through float, the precision every kernel
// computes in: the one definition for kernels/ops, kernels/attention and the
// CUDA worker's own kernels, so all of them round the same way (to nearest
// even). Device code only; include from .cu/.cuh files.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace pagoda::kernels {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_FLOAT_CONVERSION_CUH_
