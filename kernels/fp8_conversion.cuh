#ifndef PAGODA_KERNELS_FP8_CONVERSION_CUH_
#define PAGODA_KERNELS_FP8_CONVERSION_CUH_

// FP8 E4M3 ("fn": bias 7, no infinities, 0x7F/0xFF NaN, largest finite 448)
// to and from float on the device, the one definition for the FP8 KV cache
// (kernels/ops/cache_ops.cu, kernels/attention) and the FP8 linears. Both
// directions are single cvt instructions on sm_89+ and agree with the host's
// common/fp8.h bit for bit: nearest even, saturated to +-448, NaN to 0x7F.
// Device code only; include from .cu/.cuh files.

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace pagoda::kernels {

// `value` rounded to the nearest E4M3 code, ties to even, saturated.
__device__ __forceinline__ uint8_t FloatToE4M3(float value) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E4M3));
}

// Two codes (the low byte first) as their exact values: E4M3 widens to f16
// exactly, subnormals included.
__device__ __forceinline__ float2 E4M3x2ToFloat2(uint16_t codes) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3);
  return __half22float2(__half2(raw));
}

// Eight codes (the bytes of `raw`, lowest first) as their exact values.
__device__ __forceinline__ void E4M3x8ToFloat(const uint2& raw, float (&out)[8]) {
  const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float2 lo = E4M3x2ToFloat2(static_cast<uint16_t>(words[i] & 0xFFFFu));
    const float2 hi = E4M3x2ToFloat2(static_cast<uint16_t>(words[i] >> 16));
    out[4 * i] = lo.x;
    out[4 * i + 1] = lo.y;
    out[4 * i + 2] = hi.x;
    out[4 * i + 3] = hi.y;
  }
}

// FP8 E5M2 (bias 15, IEEE infinities and NaNs, largest finite 57344: the
// top byte of an f16), the --kv-cache-dtype fp8_e5m2 cache. `value` rounded
// to the nearest code, ties to even, saturated to +-57344 (infinities too),
// as the host's common/fp8.h FloatToFp8E5M2; a NaN becomes a NaN code
// (0x7F here, sign|0x7E on the host: both read back as NaN).
__device__ __forceinline__ uint8_t FloatToE5M2(float value) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(value, __NV_SATFINITE, __NV_E5M2));
}

// Eight E5M2 codes (the bytes of `raw`, lowest first) as their exact
// values: each code shifted into the top byte of an f16.
__device__ __forceinline__ void E5M2x8ToFloat(const uint2& raw, float (&out)[8]) {
  const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint16_t half_bits = static_cast<uint16_t>(((words[i] >> (8 * b)) & 0xFFu) << 8);
      out[4 * i + b] = __half2float(__ushort_as_half(half_bits));
    }
  }
}

// The FP8 formats of the KV cache as the attention kernels' template
// argument (0: a bf16/f16 cache, not FP8).
inline constexpr int kKvFp8E4M3 = 1;
inline constexpr int kKvFp8E5M2 = 2;

// Eight codes of format kFormat (kKvFp8E4M3 or kKvFp8E5M2) as floats.
template <int kFormat>
__device__ __forceinline__ void Fp8x8ToFloat(const uint2& raw, float (&out)[8]) {
  if constexpr (kFormat == kKvFp8E5M2) {
    E5M2x8ToFloat(raw, out);
  } else {
    E4M3x8ToFloat(raw, out);
  }
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_FP8_CONVERSION_CUH_
