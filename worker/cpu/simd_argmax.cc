// The row argmax of the CPU kernels (SimdKernels::argmax) at each level: the
// sampler's first pass over a row of logits. Each vector lane keeps the
// first of its largest values (a strict compare, ids ascending), in four
// independent accumulators so that the compare-and-blend chains overlap;
// the lanes then merge by value, lowest id first, which is the plain loop's
// answer exactly (compares and blends only, no arithmetic).

#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* values
// the intrinsics start from), as in simd_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "worker/cpu/simd_levels.h"

#define PAGODA_ARGMAX_AVX2 __attribute__((target("avx2,fma")))
#define PAGODA_ARGMAX_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace pagoda::worker::simd_internal {
namespace {

// The best of `lanes` (value, id) pairs: largest value, lowest id on ties;
// -inf at 0 when no value is above -inf.
size_t ArgMaxMergeLanes(const float* values, const int32_t* ids, int lanes, float* max_value) {
  float best = -INFINITY;
  int32_t best_id = 0;
  for (int k = 0; k < lanes; ++k) {
    if (values[k] > best || (values[k] == best && ids[k] < best_id)) {
      best = values[k];
      best_id = ids[k];
    }
  }
  *max_value = best;
  return static_cast<size_t>(best_id);
}

// One accumulator's step: lanes whose x is above their best take x and id.
PAGODA_ARGMAX_AVX512 inline void ArgMaxStep16(__m512 x, __m512i id, __m512& best,
                                              __m512i& best_id) {
  const __mmask16 above = _mm512_cmp_ps_mask(x, best, _CMP_GT_OQ);  // False for NaN.
  best = _mm512_mask_mov_ps(best, above, x);
  best_id = _mm512_mask_mov_epi32(best_id, above, id);
}

PAGODA_ARGMAX_AVX2 inline void ArgMaxStep8(__m256 x, __m256i id, __m256& best, __m256i& best_id) {
  const __m256 above = _mm256_cmp_ps(x, best, _CMP_GT_OQ);  // False for NaN.
  best = _mm256_blendv_ps(best, x, above);
  best_id = _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(best_id), _mm256_castsi256_ps(id), above));
}

}  // namespace

size_t ArgMaxPlain(const float* in, size_t n, float* max_value) {
  float best = -INFINITY;
  size_t best_id = 0;
  for (size_t i = 0; i < n; ++i) {
    if (in[i] > best) {  // False for NaN: it counts as -inf.
      best = in[i];
      best_id = i;
    }
  }
  *max_value = best;
  return best_id;
}

PAGODA_ARGMAX_AVX2 size_t ArgMaxAvx2(const float* in, size_t n, float* max_value) {
  __m256 best[4];
  __m256i best_id[4];
  for (int a = 0; a < 4; ++a) {
    best[a] = _mm256_set1_ps(-INFINITY);
    best_id[a] = _mm256_setzero_si256();
  }
  __m256i id = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i step = _mm256_set1_epi32(8);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int a = 0; a < 4; ++a) {
      ArgMaxStep8(_mm256_loadu_ps(in + i + 8 * a), id, best[a], best_id[a]);
      id = _mm256_add_epi32(id, step);
    }
  }
  for (; i < n; i += 8) {  // The tail, 8 at a time, padded with -inf.
    float tail[8];
    for (size_t k = 0; k < 8; ++k) tail[k] = i + k < n ? in[i + k] : -INFINITY;
    ArgMaxStep8(_mm256_loadu_ps(tail), id, best[0], best_id[0]);
    id = _mm256_add_epi32(id, step);
  }
  float values[32];
  int32_t ids[32];
  for (int a = 0; a < 4; ++a) {
    _mm256_storeu_ps(values + 8 * a, best[a]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(ids + 8 * a), best_id[a]);
  }
  return ArgMaxMergeLanes(values, ids, 32, max_value);
}

PAGODA_ARGMAX_AVX512 size_t ArgMaxAvx512(const float* in, size_t n, float* max_value) {
  __m512 best[4];
  __m512i best_id[4];
  for (int a = 0; a < 4; ++a) {
    best[a] = _mm512_set1_ps(-INFINITY);
    best_id[a] = _mm512_setzero_si512();
  }
  __m512i id = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int a = 0; a < 4; ++a) {
      ArgMaxStep16(_mm512_loadu_ps(in + i + 16 * a), id, best[a], best_id[a]);
      id = _mm512_add_epi32(id, step);
    }
  }
  for (; i < n; i += 16) {  // The tail through masked loads: -inf past the end.
    const size_t left = n - i;
    const __mmask16 valid = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
    ArgMaxStep16(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), valid, in + i), id, best[0],
                 best_id[0]);
    id = _mm512_add_epi32(id, step);
  }
  float values[64];
  int32_t ids[64];
  for (int a = 0; a < 4; ++a) {
    _mm512_storeu_ps(values + 16 * a, best[a]);
    _mm512_storeu_si512(ids + 16 * a, best_id[a]);
  }
  return ArgMaxMergeLanes(values, ids, 64, max_value);
}

}  // namespace pagoda::worker::simd_internal
