#ifndef PAGODA_WORKER_CPU_SIMD_AVX512_INLINE_H_
#define PAGODA_WORKER_CPU_SIMD_AVX512_INLINE_H_

// Inside the AVX-512 level of the CPU kernels (simd_avx512.cc and
// simd_avx512_attend16.cc): the target attribute, 16-lane loads of every
// stored dtype (Load16), the vector exp (ExpAvx512), and the hook that puts
// attend16 into the level's table. Only those files include it.

#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* values
// the conversion intrinsics start from); the warning is about the header, not
// this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "worker/cpu/fp8_simd.h"
#include "worker/cpu/simd_levels.h"

#define PAGODA_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace pagoda::worker::simd_internal {

template <DType kType>
PAGODA_AVX512 inline __m512 Load16(const void* p, size_t i) {
  if constexpr (kType == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  } else if constexpr (kType == DType::kFp8E4M3) {
    // Times 2^8 (exact) back to the code's value, as at AVX2.
    return _mm512_mul_ps(fp8_simd::E4M3x16ToFloatTimes2m8(static_cast<const uint8_t*>(p) + i),
                         _mm512_set1_ps(256.0f));
  } else if constexpr (kType == DType::kFp8E5M2) {
    return fp8_simd::E5M2x16ToFloat(static_cast<const uint8_t*>(p) + i);
  } else {
    const __m256i raw =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (kType == DType::kBF16) {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
    } else {
      return _mm512_cvtph_ps(raw);
    }
  }
}

// e^x for 16 lanes: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so
// the reduction is exact enough), e^r by its degree-6 Taylor polynomial
// (error below 2e-7 relative), times 2^n by scalef, which gives inf or 0
// past the f32 range instead of wrapping the exponent.
PAGODA_AVX512 inline __m512 ExpAvx512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(89.0f)), _mm512_set1_ps(-104.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// Sets the table's attend16 entries (simd_avx512_attend16.cc).
void SetAttend16Avx512(SimdKernels& kernels);

}  // namespace pagoda::worker::simd_internal

#endif  // PAGODA_WORKER_CPU_SIMD_AVX512_INLINE_H_
