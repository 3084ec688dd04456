// Device helpers shared by the attention kernels: 16-byte vector conversions
// between bf16/f16 and f32, the loads of a KV cache chunk (bf16/f16 or FP8
// E4M3), warp reductions, and the online-softmax constants.
// Scores are kept in the log2 domain (pre-multiplied by log2(e)) so that every
// exponential is one exp2f.
#ifndef PAGODA_KERNELS_ATTENTION_ATTENTION_COMMON_CUH_
#define PAGODA_KERNELS_ATTENTION_ATTENTION_COMMON_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/float_conversion.cuh"
#include "kernels/fp8_conversion.cuh"

namespace pagoda::kernels::attention_internal {

constexpr float kLog2e = 1.4426950408889634f;
// Initial running maximum. Finite so that exp2f(running_max - new_max) is never
// NaN; masked scores use -INFINITY, whose exp2f is exactly 0.
constexpr float kNoMax = -1.0e30f;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ __forceinline__ void ToFloat8(const uint4& raw, float (&out)[8]) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f;
    if constexpr (std::is_same_v<T, __half>) {
      __half2 h = *reinterpret_cast<const __half2*>(&words[i]);
      f = __half22float2(h);
    } else {
      __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&words[i]);
      f = __bfloat1622float2(h);
    }
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

// Converts one 32-bit word holding two elements.
template <typename T>
__device__ __forceinline__ float2 WordToFloat2(uint32_t word) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(*reinterpret_cast<const __half2*>(&word));
  } else {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word));
  }
}

// Read-only, non-coherent 16-byte load: the KV cache is not written during
// attention.
__device__ __forceinline__ uint4 LoadReadOnly16(const void* address) {
  return __ldg(reinterpret_cast<const uint4*>(address));
}

// Eight consecutive elements of a K or V row as one load: 16 bytes of a
// bf16/f16 cache (T), 8 of an FP8 E4M3 one (kFp8: codes, scales applied by
// the caller).
template <typename T, int kFp8>
struct KvChunk {
  using Elem = std::conditional_t<kFp8 != 0, uint8_t, T>;
  using Raw = std::conditional_t<kFp8 != 0, uint2, uint4>;

  __device__ __forceinline__ static Raw Load(const Elem* address) {
    if constexpr (kFp8 != 0) {
      return __ldg(reinterpret_cast<const uint2*>(address));
    } else {
      return LoadReadOnly16(address);
    }
  }
  __device__ __forceinline__ static Raw Zero() { return Raw{}; }
  // The eight elements' exact values (an FP8 code's, unscaled).
  __device__ __forceinline__ static void Widen(const Raw& raw, float (&out)[8]) {
    if constexpr (kFp8 != 0) {
      Fp8x8ToFloat<kFp8>(raw, out);
    } else {
      ToFloat8<T>(raw, out);
    }
  }
};

__device__ __forceinline__ float WarpMax(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ __forceinline__ float WarpSum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullMask, value, offset);
  }
  return value;
}

}  // namespace pagoda::kernels::attention_internal

#endif  // PAGODA_KERNELS_ATTENTION_ATTENTION_COMMON_CUH_
