// The AVX-512 level's attend16 (simd.h): decode attention of one query row
// at head_dim 16 over a paged KV cache, for every cache dtype.

#include <algorithm>
#include <cmath>

#include "worker/cpu/simd_avx512_inline.h"

namespace pagoda::worker::simd_internal {
namespace {

// ---- Decode attention at head_dim 16 (attend16) ----
//
// A key row is one vector, so a score is a 16-lane product and a horizontal
// sum: the sums of 16 keys are taken together, halving the partial sums per
// key at each of four levels (about three shuffles and adds a key, against
// Sum4x16's five), into one vector of 16 scores, whose softmax is then
// vector work: a chunk's max, one vector exp, and a rescale of the
// accumulators only where the max grew (online softmax, FlashAttention's).

// Lanes 0-7: key A's eight partial sums; lanes 8-15: key B's.
template <DType kType>
PAGODA_AVX512 inline __m512 PairPartials(const void* rows, bool has_b, const __m512 q,
                                         const __m512 q_even, const __m512 q_odd) {
  if constexpr (kType == DType::kBF16) {
    // Two bf16 rows are one 64-byte vector whose 32-bit lane l holds dims
    // 2l, 2l+1 of key A (l < 8) or B: the even dim widens by a shift, the odd
    // one by clearing the low half, each against its half of the query.
    const __m512i v = has_b ? _mm512_loadu_si512(rows) : _mm512_maskz_loadu_epi32(0x00FF, rows);
    const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(-65536)));
    return _mm512_fmadd_ps(odd, q_odd, _mm512_mul_ps(even, q_even));
  } else {
    const __m512 a = _mm512_mul_ps(Load16<kType>(rows, 0), q);
    const __m512 b = has_b ? _mm512_mul_ps(Load16<kType>(rows, 16), q) : _mm512_setzero_ps();
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
}

// Scores of keys [0, n) (n in 1..16) of 16 contiguous rows, lane k key k;
// lanes past n hold 0 (the caller masks them).
template <DType kType>
PAGODA_AVX512 inline __m512 ScoreChunk16(const void* rows, int n, const __m512 q,
                                         const __m512 q_even, const __m512 q_odd) {
  const size_t row_bytes = 16 * DTypeSize(kType);
  __m512 pairs[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    pairs[i] = 2 * i < n ? PairPartials<kType>(static_cast<const char*>(rows) + 2 * i * row_bytes,
                                               2 * i + 1 < n, q, q_even, q_odd)
                         : _mm512_setzero_ps();
  }
  // 128-bit lane m of quad p: key 4p + m's four partials.
  __m512 quads[4];
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    const __m512 a = pairs[2 * p], b = pairs[2 * p + 1];
    quads[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Lane m of each 128 bits: [key m, key 4 + m] (two partials each) of
  // halves[0], the keys 8 further of halves[1].
  __m512 halves[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512 a = quads[2 * h], b = quads[2 * h + 1];
    halves[h] = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // Element 4m + e: key 4e + m, put back in key order.
  const __m512 sums =
      _mm512_add_ps(_mm512_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_ps(halves[0], halves[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, sums);
}

// The weighted values of keys [0, n): for bf16, pairs of rows as in
// PairPartials (even dims into acc_even, odd ones into acc_odd, key A in
// lanes 0-7, B in 8-15); otherwise a row a key into acc_even.
template <DType kType>
PAGODA_AVX512 inline void WeighChunk16(const void* rows, int n, const __m512 weights,
                                       __m512& acc_even, __m512& acc_odd) {
  const size_t row_bytes = 16 * DTypeSize(kType);
  if constexpr (kType == DType::kBF16) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      if (2 * i >= n) break;
      const void* pair = static_cast<const char*>(rows) + 2 * i * row_bytes;
      const __m512i v =
          2 * i + 1 < n ? _mm512_loadu_si512(pair) : _mm512_maskz_loadu_epi32(0x00FF, pair);
      const __m512i which =
          _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * i), _mm512_set1_epi32(2 * i + 1));
      const __m512 w = _mm512_permutexvar_ps(which, weights);
      acc_even = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), w, acc_even);
      acc_odd = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(-65536))),
                                w, acc_odd);
    }
  } else {
    alignas(64) float w[16];
    _mm512_store_ps(w, weights);
    for (int k = 0; k < n; ++k) {
      const __m512 row = Load16<kType>(static_cast<const char*>(rows) + k * row_bytes, 0);
      if (k % 2 == 0) {
        acc_even = _mm512_fmadd_ps(_mm512_set1_ps(w[k]), row, acc_even);
      } else {
        acc_odd = _mm512_fmadd_ps(_mm512_set1_ps(w[k]), row, acc_odd);
      }
    }
  }
}

// Fetches a block's rows (K or V) two blocks ahead of the one computed:
// blocks are scattered, and the hardware prefetcher finds them late. In a
// burst before the block: one line per pair inside the loops measured no
// faster (bench_cpu_attention 1 bf16 600 377 4,4,16,1, 3 interleaved runs).
// Always inlined: GCC's IPA finds a function whose only effect is a
// prefetch to have none, and drops its calls (it did, inside the loops).
[[gnu::always_inline]] PAGODA_AVX512 inline void PrefetchRows(const char* rows, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += 64) _mm_prefetch(rows + offset, _MM_HINT_T0);
}

template <DType kType>
PAGODA_AVX512 void Attend16Avx512(const void* key_rows, const void* value_rows,
                                  const int32_t* table, size_t block_bytes, int block_size,
                                  int keys, const float* q, float scale, float value_scale,
                                  float* out) {
  constexpr int kAhead = 2;
  const size_t row_bytes = 16 * DTypeSize(kType);
  const auto* k_base = static_cast<const char*>(key_rows);
  const auto* v_base = static_cast<const char*>(value_rows);
  const __m512 qv = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_set1_ps(scale));
  // Lane l of q_even / q_odd: dims 2(l % 8) and 2(l % 8) + 1.
  const __m512i even_dims = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
  const __m512 q_even = _mm512_permutexvar_ps(even_dims, qv);
  const __m512 q_odd = _mm512_permutexvar_ps(_mm512_add_epi32(even_dims, _mm512_set1_epi32(1)), qv);
  __m512 acc_even = _mm512_setzero_ps(), acc_odd = _mm512_setzero_ps();
  __m512 sum = _mm512_setzero_ps();
  float max = -INFINITY;
  const int blocks = (keys + block_size - 1) / block_size;
  for (int b = 0; b < blocks; ++b) {
    if (b + kAhead < blocks) {
      const size_t ahead = static_cast<size_t>(table[b + kAhead]) * block_bytes;
      const int ahead_keys = std::min(block_size, keys - (b + kAhead) * block_size);
      PrefetchRows(k_base + ahead, ahead_keys * row_bytes);
      PrefetchRows(v_base + ahead, ahead_keys * row_bytes);
    }
    const size_t block = static_cast<size_t>(table[b]) * block_bytes;
    const int block_keys = std::min(block_size, keys - b * block_size);
    for (int j = 0; j < block_keys; j += 16) {
      const int n = std::min(16, block_keys - j);
      const __mmask16 valid = static_cast<__mmask16>((1u << n) - 1);
      const char* k_rows = k_base + block + j * row_bytes;
      const __m512 scores = _mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY),
                                                 ScoreChunk16<kType>(k_rows, n, qv, q_even, q_odd));
      const float chunk_max = _mm512_reduce_max_ps(scores);
      if (chunk_max > max) {  // 0 while nothing is summed yet.
        const __m512 rescale = ExpAvx512(_mm512_set1_ps(max - chunk_max));
        sum = _mm512_mul_ps(sum, rescale);
        acc_even = _mm512_mul_ps(acc_even, rescale);
        acc_odd = _mm512_mul_ps(acc_odd, rescale);
        max = chunk_max;
      }
      const __m512 weights =
          _mm512_maskz_mov_ps(valid, ExpAvx512(_mm512_sub_ps(scores, _mm512_set1_ps(max))));
      sum = _mm512_add_ps(sum, weights);
      WeighChunk16<kType>(v_base + block + j * row_bytes, n, weights, acc_even, acc_odd);
    }
  }
  const float inv = value_scale / _mm512_reduce_add_ps(sum);
  alignas(64) float even[16], odd[16];
  _mm512_store_ps(even, acc_even);
  _mm512_store_ps(odd, acc_odd);
  if constexpr (kType == DType::kBF16) {
    for (int l = 0; l < 8; ++l) {
      out[2 * l] = (even[l] + even[l + 8]) * inv;
      out[2 * l + 1] = (odd[l] + odd[l + 8]) * inv;
    }
  } else {
    for (int d = 0; d < 16; ++d) out[d] = (even[d] + odd[d]) * inv;
  }
}

}  // namespace

void SetAttend16Avx512(SimdKernels& kernels) {
  kernels.attend16_f32 = Attend16Avx512<DType::kF32>;
  kernels.attend16_bf16 = Attend16Avx512<DType::kBF16>;
  kernels.attend16_f16 = Attend16Avx512<DType::kF16>;
  kernels.attend16_fp8e4m3 = Attend16Avx512<DType::kFp8E4M3>;
  kernels.attend16_fp8e5m2 = Attend16Avx512<DType::kFp8E5M2>;
}

}  // namespace pagoda::worker::simd_internal
