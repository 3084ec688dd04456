#ifndef PAGODA_WORKER_CPU_FP8_SIMD_H_
#define PAGODA_WORKER_CPU_FP8_SIMD_H_

// FP8 E4M3 and E5M2 codes widened to f32 in registers through F16C, shared by the
// FP8 Linear's kernels (w8a8_kernels.cc) and the FP8 KV cache's attention
// kernels (simd_avx2.cc, simd_avx512.cc). Only those files include it.

#include <immintrin.h>

#include <cstdint>

#define PAGODA_FP8_SIMD_AVX2 __attribute__((target("avx2,fma,f16c")))
#define PAGODA_FP8_SIMD_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

namespace pagoda::worker::fp8_simd {

// E4M3 to f16 moves the exponent and mantissa down one bit under the sign
// (f16 has one more exponent bit, bias 15 against 7): with the code in the
// high byte of a 16-bit lane, an arithmetic shift by one does it and copies
// the sign into bit 14, which the mask clears. Exact, subnormals included;
// the value comes out scaled by 2^-8, which the caller multiplies back (or
// folds into a scale). The NaN codes 0x7F/0xFF come out as +-480 * 2^-8.
// Three integer operations, then vcvtph2ps.
PAGODA_FP8_SIMD_AVX2 inline __m128i E4M3ToHalfTimes2m8(__m128i words) {
  return _mm_and_si128(_mm_srai_epi16(_mm_slli_epi16(words, 8), 1),
                       _mm_set1_epi16(static_cast<int16_t>(0xBFFF)));
}
// The same over sixteen 16-bit lanes: 256-bit integer operations, which run
// on more ports than 512-bit ones.
PAGODA_FP8_SIMD_AVX2 inline __m256i E4M3ToHalfTimes2m8(__m256i words) {
  return _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(words, 8), 1),
                          _mm256_set1_epi16(static_cast<int16_t>(0xBFFF)));
}

// Eight codes (8 bytes read) as f32 times 2^-8.
PAGODA_FP8_SIMD_AVX2 inline __m256 E4M3x8ToFloatTimes2m8(const uint8_t* codes) {
  const __m128i words = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  return _mm256_cvtph_ps(E4M3ToHalfTimes2m8(words));
}

// Sixteen codes (16 bytes read) as f32 times 2^-8.
PAGODA_FP8_SIMD_AVX512 inline __m512 E4M3x16ToFloatTimes2m8(const uint8_t* codes) {
  return _mm512_cvtph_ps(E4M3ToHalfTimes2m8(
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)))));
}

// E5M2 is the top byte of a half: eight codes (8 bytes read) moved up a
// byte and converted, exactly (infinities and NaNs included).
PAGODA_FP8_SIMD_AVX2 inline __m256 E5M2x8ToFloat(const uint8_t* codes) {
  const __m128i words = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  return _mm256_cvtph_ps(_mm_slli_epi16(words, 8));
}

// Sixteen E5M2 codes (16 bytes read).
PAGODA_FP8_SIMD_AVX512 inline __m512 E5M2x16ToFloat(const uint8_t* codes) {
  return _mm512_cvtph_ps(_mm256_slli_epi16(
      _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes))), 8));
}

}  // namespace pagoda::worker::fp8_simd

#endif  // PAGODA_WORKER_CPU_FP8_SIMD_H_
