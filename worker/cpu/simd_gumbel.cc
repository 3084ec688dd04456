// The Gumbel-max draw's candidate scan (SimdKernels::gumbel_candidates) at
// each level. A drawn row needs the Philox word of every surviving token, but
// the two logs of its noise only where the noise's bucket bound could reach
// the best score so far: this scan is the part that runs over the whole
// vocabulary. The vector levels run Philox4x32-10 on 8 or 16 counters at
// once (a 32 x 32 -> 64-bit multiply per even and per odd lane, blended) and
// transpose the four words of each counter into token order; their fma,
// compares and integer operations are exact, so they pick exactly the plain
// loop's ids. They first skip any block of 64 (AVX-512) or 32 tokens whose
// largest logit cannot reach the best score even with the largest bound:
// on real logits, spread far below their maximum, most of a row.

#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* values
// the intrinsics start from), as in simd_avx512.cc.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/ops/philox.h"
#include "worker/cpu/simd_levels.h"

#define PAGODA_GUMBEL_AVX2 __attribute__((target("avx2,fma")))
#define PAGODA_GUMBEL_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace pagoda::worker::simd_internal {
namespace {

// Philox4x32-10's constants (kernels/ops/philox.h).
constexpr uint32_t kGumbelPhiloxMul0 = 0xD2511F53u;
constexpr uint32_t kGumbelPhiloxMul1 = 0xCD9E8D57u;
constexpr uint32_t kGumbelPhiloxWeyl0 = 0x9E3779B9u;
constexpr uint32_t kGumbelPhiloxWeyl1 = 0xBB67AE85u;
constexpr int kGumbelBoundShift = kGumbelScanBoundShift;

// The plain loop's test of one token, which every level reproduces.
bool GumbelCandidatePlain(float x, uint32_t bits, const GumbelScan& scan) {
  if (std::isnan(x) || x == -INFINITY) return false;
  const uint32_t raw = std::bit_cast<uint32_t>(x);
  const uint32_t key = (raw & 0x80000000u) ? ~raw : (raw | 0x80000000u);
  if (key < scan.min_key) return false;
  const float bound =
      std::fma(x - scan.max_logit, scan.inv_t, scan.bounds[bits >> kGumbelBoundShift]);
  return !(bound < scan.best_score);
}

// Whether no token of a block whose largest logit is `largest` (NaN taken
// as -inf) can be a candidate, whatever its noise: then the block needs no
// Philox. fma is monotone in x (inv_t > 0) and in the bound.
inline bool GumbelBlockOutOfReach(float largest, const GumbelScan& scan) {
  return std::fma(largest - scan.max_logit, scan.inv_t, scan.largest_bound) < scan.best_score;
}

// ---- AVX-512: 16 counters, 64 tokens a pass ----

// hi and lo of a * k for 16 unsigned 32-bit lanes.
PAGODA_GUMBEL_AVX512 inline void GumbelMulHiLo16(__m512i a, __m512i k, __m512i& hi, __m512i& lo) {
  const __m512i even = _mm512_mul_epu32(a, k);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), k);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

// The words of counters group .. group + 15 of the stream, in token order:
// words[j] holds counters group + 4j .. group + 4j + 3, four words each.
PAGODA_GUMBEL_AVX512 void GumbelPhilox16(uint64_t group, const GumbelScan& scan, __m512i words[4]) {
  const __m512i base = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(group)));
  __m512i c0 = _mm512_add_epi32(
      base, _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, base);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(group >> 32)));
  __m512i c1 = _mm512_mask_add_epi32(high, carry, high, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(scan.stream)));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(scan.stream >> 32)));
  uint32_t key0 = static_cast<uint32_t>(scan.seed), key1 = static_cast<uint32_t>(scan.seed >> 32);
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(kGumbelPhiloxMul0));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(kGumbelPhiloxMul1));
  for (int round = 0; round < 10; ++round) {
    __m512i hi0, lo0, hi1, lo1;
    GumbelMulHiLo16(c0, mul0, hi0, lo0);
    GumbelMulHiLo16(c2, mul1, hi1, lo1);
    c0 = _mm512_ternarylogic_epi32(hi1, c1, _mm512_set1_epi32(static_cast<int>(key0)), 0x96);
    c2 = _mm512_ternarylogic_epi32(hi0, c3, _mm512_set1_epi32(static_cast<int>(key1)), 0x96);
    c1 = lo1;
    c3 = lo0;
    key0 += kGumbelPhiloxWeyl0;
    key1 += kGumbelPhiloxWeyl1;
  }
  // Transpose: within each 128-bit block b, t_k holds counter 4b + k's words.
  const __m512i a = _mm512_unpacklo_epi32(c0, c1), b = _mm512_unpackhi_epi32(c0, c1);
  const __m512i c = _mm512_unpacklo_epi32(c2, c3), d = _mm512_unpackhi_epi32(c2, c3);
  const __m512i t0 = _mm512_unpacklo_epi64(a, c), t1 = _mm512_unpackhi_epi64(a, c);
  const __m512i t2 = _mm512_unpacklo_epi64(b, d), t3 = _mm512_unpackhi_epi64(b, d);
  const __m512i u0 = _mm512_shuffle_i32x4(t0, t1, 0x44), u1 = _mm512_shuffle_i32x4(t2, t3, 0x44);
  const __m512i u2 = _mm512_shuffle_i32x4(t0, t1, 0xEE), u3 = _mm512_shuffle_i32x4(t2, t3, 0xEE);
  words[0] = _mm512_shuffle_i32x4(u0, u1, 0x88);
  words[1] = _mm512_shuffle_i32x4(u0, u1, 0xDD);
  words[2] = _mm512_shuffle_i32x4(u2, u3, 0x88);
  words[3] = _mm512_shuffle_i32x4(u2, u3, 0xDD);
}

// The candidates among 16 tokens (x, their words), appended to ids as
// `offset` + lane.
PAGODA_GUMBEL_AVX512 inline size_t GumbelTest16(__m512 x, __m512i bits, const GumbelScan& scan,
                                                uint32_t offset, uint32_t* ids) {
  const __mmask16 finite = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ);
  const __m512i raw = _mm512_castps_si512(x);
  const __m512i flip = _mm512_or_si512(_mm512_srai_epi32(raw, 31), _mm512_set1_epi32(INT32_MIN));
  const __m512i key = _mm512_xor_si512(raw, flip);
  const __mmask16 kept =
      _mm512_mask_cmpge_epu32_mask(finite, key, _mm512_set1_epi32(static_cast<int>(scan.min_key)));
  if (kept == 0) return 0;
  const __m512 noise =
      _mm512_i32gather_ps(_mm512_srli_epi32(bits, kGumbelBoundShift), scan.bounds, 4);
  const __m512 bound = _mm512_fmadd_ps(_mm512_sub_ps(x, _mm512_set1_ps(scan.max_logit)),
                                       _mm512_set1_ps(scan.inv_t), noise);
  unsigned mask =
      _mm512_mask_cmp_ps_mask(kept, bound, _mm512_set1_ps(scan.best_score), _CMP_NLT_UQ);
  size_t count = 0;
  for (; mask != 0; mask &= mask - 1) ids[count++] = offset + std::countr_zero(mask);
  return count;
}

// ---- AVX2: 8 counters, 32 tokens a pass ----

PAGODA_GUMBEL_AVX2 inline void GumbelMulHiLo8(__m256i a, __m256i k, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, k);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), k);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

PAGODA_GUMBEL_AVX2 void GumbelPhilox8(uint64_t group, const GumbelScan& scan, __m256i words[4]) {
  const __m256i sign = _mm256_set1_epi32(INT32_MIN);
  const __m256i base = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(group)));
  __m256i c0 = _mm256_add_epi32(base, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  // Unsigned c0 < base (a wrap): signed compare of both with the sign flipped.
  const __m256i carry =
      _mm256_cmpgt_epi32(_mm256_xor_si256(base, sign), _mm256_xor_si256(c0, sign));
  __m256i c1 = _mm256_sub_epi32(
      _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(group >> 32))), carry);
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(scan.stream)));
  __m256i c3 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(scan.stream >> 32)));
  uint32_t key0 = static_cast<uint32_t>(scan.seed), key1 = static_cast<uint32_t>(scan.seed >> 32);
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(kGumbelPhiloxMul0));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(kGumbelPhiloxMul1));
  for (int round = 0; round < 10; ++round) {
    __m256i hi0, lo0, hi1, lo1;
    GumbelMulHiLo8(c0, mul0, hi0, lo0);
    GumbelMulHiLo8(c2, mul1, hi1, lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(key0)));
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(key1)));
    c1 = lo1;
    c3 = lo0;
    key0 += kGumbelPhiloxWeyl0;
    key1 += kGumbelPhiloxWeyl1;
  }
  // Transpose: within each 128-bit half h, t_k holds counter 4h + k's words.
  const __m256i a = _mm256_unpacklo_epi32(c0, c1), b = _mm256_unpackhi_epi32(c0, c1);
  const __m256i c = _mm256_unpacklo_epi32(c2, c3), d = _mm256_unpackhi_epi32(c2, c3);
  const __m256i t0 = _mm256_unpacklo_epi64(a, c), t1 = _mm256_unpackhi_epi64(a, c);
  const __m256i t2 = _mm256_unpacklo_epi64(b, d), t3 = _mm256_unpackhi_epi64(b, d);
  words[0] = _mm256_permute2x128_si256(t0, t1, 0x20);
  words[1] = _mm256_permute2x128_si256(t2, t3, 0x20);
  words[2] = _mm256_permute2x128_si256(t0, t1, 0x31);
  words[3] = _mm256_permute2x128_si256(t2, t3, 0x31);
}

PAGODA_GUMBEL_AVX2 inline size_t GumbelTest8(__m256 x, __m256i bits, const GumbelScan& scan,
                                             uint32_t offset, uint32_t* ids) {
  const __m256 finite = _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ);
  const __m256i sign = _mm256_set1_epi32(INT32_MIN);
  const __m256i raw = _mm256_castps_si256(x);
  const __m256i key = _mm256_xor_si256(raw, _mm256_or_si256(_mm256_srai_epi32(raw, 31), sign));
  // Unsigned key < min_key, as a signed compare with the sign flipped.
  const __m256i below = _mm256_cmpgt_epi32(
      _mm256_set1_epi32(static_cast<int>(scan.min_key ^ 0x80000000u)), _mm256_xor_si256(key, sign));
  const __m256 kept = _mm256_andnot_ps(_mm256_castsi256_ps(below), finite);
  if (_mm256_movemask_ps(kept) == 0) return 0;
  const __m256 noise =
      _mm256_i32gather_ps(scan.bounds, _mm256_srli_epi32(bits, kGumbelBoundShift), 4);
  const __m256 bound = _mm256_fmadd_ps(_mm256_sub_ps(x, _mm256_set1_ps(scan.max_logit)),
                                       _mm256_set1_ps(scan.inv_t), noise);
  const __m256 reach = _mm256_cmp_ps(bound, _mm256_set1_ps(scan.best_score), _CMP_NLT_UQ);
  unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_and_ps(kept, reach)));
  size_t count = 0;
  for (; mask != 0; mask &= mask - 1) ids[count++] = offset + std::countr_zero(mask);
  return count;
}

}  // namespace

size_t GumbelCandidatesPlain(const float* logits, size_t n, uint64_t first, const GumbelScan& scan,
                             uint32_t* ids) {
  size_t count = 0;
  for (size_t begin = 0; begin < n; begin += 4) {
    const kernels::Philox4x32Block draws =
        kernels::PhiloxDraws(scan.seed, scan.stream, (first + begin) / 4);
    for (size_t i = begin; i < n && i < begin + 4; ++i) {
      if (GumbelCandidatePlain(logits[i], draws.v[i - begin], scan)) {
        ids[count++] = static_cast<uint32_t>(i);
      }
    }
  }
  return count;
}

PAGODA_GUMBEL_AVX2 size_t GumbelCandidatesAvx2(const float* logits, size_t n, uint64_t first,
                                               const GumbelScan& scan, uint32_t* ids) {
  size_t count = 0;
  for (size_t begin = 0; begin < n; begin += 32) {
    float tail[32];
    const float* in = logits + begin;
    if (n - begin < 32) {  // Padded with -inf, which is never a candidate.
      for (size_t k = 0; k < 32; ++k) tail[k] = begin + k < n ? in[k] : -INFINITY;
      in = tail;
    }
    __m256 x[4];
    for (int j = 0; j < 4; ++j) {  // NaN as -inf, as at AVX-512.
      const __m256 loaded = _mm256_loadu_ps(in + 8 * j);
      x[j] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), loaded,
                              _mm256_cmp_ps(loaded, loaded, _CMP_ORD_Q));
    }
    __m256 largest = _mm256_max_ps(_mm256_max_ps(x[0], x[1]), _mm256_max_ps(x[2], x[3]));
    largest = _mm256_max_ps(largest, _mm256_permute2f128_ps(largest, largest, 1));
    largest = _mm256_max_ps(largest, _mm256_permute_ps(largest, 0x4E));
    largest = _mm256_max_ps(largest, _mm256_permute_ps(largest, 0xB1));
    if (GumbelBlockOutOfReach(_mm256_cvtss_f32(largest), scan)) continue;
    __m256i words[4];
    GumbelPhilox8((first + begin) / 4, scan, words);
    for (int j = 0; j < 4; ++j) {
      count += GumbelTest8(x[j], words[j], scan, static_cast<uint32_t>(begin + 8 * j), ids + count);
    }
  }
  return count;
}

PAGODA_GUMBEL_AVX512 size_t GumbelCandidatesAvx512(const float* logits, size_t n, uint64_t first,
                                                   const GumbelScan& scan, uint32_t* ids) {
  size_t count = 0;
  for (size_t begin = 0; begin < n; begin += 64) {
    __m512 x[4];
    for (int j = 0; j < 4; ++j) {  // -inf past the end.
      const size_t at = std::min(begin + 16 * j, n), left = n - at;
      const __mmask16 valid = left >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << left) - 1);
      const __m512 loaded = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), valid, logits + at);
      // NaN as -inf (neither is ever a candidate), so that the max is exact.
      x[j] = _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY),
                                _mm512_cmp_ps_mask(loaded, loaded, _CMP_ORD_Q), loaded);
    }
    const __m512 largest = _mm512_max_ps(_mm512_max_ps(x[0], x[1]), _mm512_max_ps(x[2], x[3]));
    if (GumbelBlockOutOfReach(_mm512_reduce_max_ps(largest), scan)) continue;
    __m512i words[4];
    GumbelPhilox16((first + begin) / 4, scan, words);
    for (int j = 0; j < 4; ++j) {
      count +=
          GumbelTest16(x[j], words[j], scan, static_cast<uint32_t>(begin + 16 * j), ids + count);
    }
  }
  return count;
}

}  // namespace pagoda::worker::simd_internal
