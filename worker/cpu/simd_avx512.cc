// The AVX-512F level of the CPU kernels, compiled for that target function by
// function (the binary runs on plain x86-64). Its panel packing and exp_sum
// are the AVX2 level's (valid here); its attend16 is in
// simd_avx512_attend16.cc.

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/cpu/simd_avx512_inline.h"

namespace pagoda::worker::simd_internal {
namespace {

// [sum(a), sum(b), sum(c), sum(d)]: four horizontal sums sharing shuffles.
PAGODA_AVX512 inline __m128 Sum4x16(__m512 a, __m512 b, __m512 c, __m512 d) {
  // 128-bit lanes [a0+a2, a1+a3, b0+b2, b1+b3] and the same for c, d.
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane k holds four partial sums of the k-th input.
  const __m512 t = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m128 h01 = _mm_hadd_ps(_mm512_castps512_ps128(t), _mm512_extractf32x4_ps(t, 1));
  const __m128 h23 = _mm_hadd_ps(_mm512_extractf32x4_ps(t, 2), _mm512_extractf32x4_ps(t, 3));
  return _mm_hadd_ps(h01, h23);
}

template <DType kType>
PAGODA_AVX512 float DotAvx512(const void* a, const float* b, size_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    acc0 = _mm512_fmadd_ps(Load16<kType>(a, i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(Load16<kType>(a, i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    acc2 = _mm512_fmadd_ps(Load16<kType>(a, i + 32), _mm512_loadu_ps(b + i + 32), acc2);
    acc3 = _mm512_fmadd_ps(Load16<kType>(a, i + 48), _mm512_loadu_ps(b + i + 48), acc3);
  }
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm512_fmadd_ps(Load16<kType>(a, i), _mm512_loadu_ps(b + i), acc0);
  }
  float sum =
      _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += Load<kType>(a, i) * b[i];
  return sum;
}

// Keys [j0, j0 + kKeys) for kRows heads: kKeys x 4 accumulators (16 at
// four keys), the keys' vectors and one query vector; each query load
// serves kKeys keys, each key load kRows heads. Heads past kRows sum zeros.
template <DType kType, int kRows, int kKeys>
PAGODA_AVX512 void ScoreKeysAvx512(const void* x, size_t ld_x, size_t j0, size_t n, const float* q,
                                   size_t ld_q, float* s, size_t ld_s) {
  __m512 acc[kKeys][4];
#pragma GCC unroll 4
  for (int k = 0; k < kKeys; ++k) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) acc[k][r] = _mm512_setzero_ps();
  }
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 key[kKeys];
#pragma GCC unroll 4
    for (int k = 0; k < kKeys; ++k) key[k] = Load16<kType>(x, (j0 + k) * ld_x + i);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m512 query = _mm512_loadu_ps(q + r * ld_q + i);
#pragma GCC unroll 4
      for (int k = 0; k < kKeys; ++k) acc[k][r] = _mm512_fmadd_ps(key[k], query, acc[k][r]);
    }
  }
  for (int k = 0; k < kKeys; ++k) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, Sum4x16(acc[k][0], acc[k][1], acc[k][2], acc[k][3]));
    for (size_t t = i; t < n; ++t) {
      const float element = Load<kType>(x, (j0 + k) * ld_x + t);
      for (int r = 0; r < kRows; ++r) sums[r] += element * q[r * ld_q + t];
    }
    for (int r = 0; r < kRows; ++r) s[r * ld_s + j0 + k] = sums[r];
  }
}

// One head (decode without grouped queries): keys [j0, j0 + 4), their four
// sums out of one Sum4x16 instead of one each (at head_dim 16 the shuffles
// of the sums were most of a key's work). Each key's sum is the one
// ScoreKeysAvx512 gives, to the bit: the same lanes added in the same order.
template <DType kType>
PAGODA_AVX512 void ScoreFourKeysOneRowAvx512(const void* x, size_t ld_x, size_t j0, size_t n,
                                             const float* q, float* s) {
  __m512 acc[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) acc[k] = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 query = _mm512_loadu_ps(q + i);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm512_fmadd_ps(Load16<kType>(x, (j0 + k) * ld_x + i), query, acc[k]);
    }
  }
  alignas(16) float sums[4];
  _mm_store_ps(sums, Sum4x16(acc[0], acc[1], acc[2], acc[3]));
  for (int k = 0; k < 4; ++k) {
    for (size_t t = i; t < n; ++t) sums[k] += Load<kType>(x, (j0 + k) * ld_x + t) * q[t];
    s[j0 + k] = sums[k];
  }
}

template <DType kType, int kRows>
PAGODA_AVX512 void ScoreRowsAvx512(const void* x, size_t ld_x, size_t keys, size_t n,
                                   const float* q, size_t ld_q, float* s, size_t ld_s) {
  size_t j = 0;
  if constexpr (kRows == 1) {
    for (; j + 4 <= keys; j += 4) ScoreFourKeysOneRowAvx512<kType>(x, ld_x, j, n, q, s);
  }
  for (; j + 4 <= keys; j += 4) ScoreKeysAvx512<kType, kRows, 4>(x, ld_x, j, n, q, ld_q, s, ld_s);
  for (; j < keys; ++j) ScoreKeysAvx512<kType, kRows, 1>(x, ld_x, j, n, q, ld_q, s, ld_s);
}

template <DType kType>
PAGODA_AVX512 void Score4Avx512(const void* x, size_t ld_x, size_t keys, size_t n, const float* q,
                                size_t ld_q, int rows, float* s, size_t ld_s) {
  switch (rows) {
    case 1:
      return ScoreRowsAvx512<kType, 1>(x, ld_x, keys, n, q, ld_q, s, ld_s);
    case 2:
      return ScoreRowsAvx512<kType, 2>(x, ld_x, keys, n, q, ld_q, s, ld_s);
    case 3:
      return ScoreRowsAvx512<kType, 3>(x, ld_x, keys, n, q, ld_q, s, ld_s);
    default:
      return ScoreRowsAvx512<kType, 4>(x, ld_x, keys, n, q, ld_q, s, ld_s);
  }
}

template <DType kType, int kRows>
PAGODA_AVX512 void Tile4RowsAvx512(const void* w, size_t ld_w, const float* x, size_t ld_x,
                                   size_t n, float* y, size_t ld_y) {
  const auto* base = static_cast<const char*>(w);
  const size_t row_bytes = ld_w * DTypeSize(kType);
  const void* rows_w[4] = {base, base + row_bytes, base + 2 * row_bytes, base + 3 * row_bytes};
  // Weight rows are streamed from memory, and the hardware prefetcher alone
  // does not keep enough of them in flight (on this project's 2-core VM a
  // batch-1 decode step ran about twice as slow without software prefetch:
  // 3.9 against 1.9 ms, 4.4 against 2.4 ms while memory was contended). A tile of several tokens
  // reuses each weight slice from L1 and L2, so its rows are fetched two groups ahead; a single
  // token fetches the next group only. Into every level, never non-temporal: on a Xeon whose L3
  // (260 MB) holds a small model's weights, a non-temporal fetch kept them out of it, and a
  // batch-1 step of the b1 model took 7.8-9.5 ms against 2.2-2.3 ms.
  const size_t prefetch = (kRows == 1 ? 4 : 8) * row_bytes;
  __m512 acc[kRows][4];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 wv[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      wv[c] = Load16<kType>(rows_w[c], i);
      _mm_prefetch(static_cast<const char*>(rows_w[c]) + i * DTypeSize(kType) + prefetch,
                   _MM_HINT_T0);
    }
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * ld_x + i);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, Sum4x16(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
    const float* xr = x + r * ld_x;
    for (size_t k = i; k < n; ++k) {
      for (int c = 0; c < 4; ++c) sums[c] += Load<kType>(rows_w[c], k) * xr[k];
    }
    for (int c = 0; c < 4; ++c) y[r * ld_y + c] = sums[c];
  }
}

template <DType kType>
PAGODA_AVX512 void Tile4Avx512(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n,
                               int rows, float* y, size_t ld_y) {
  switch (rows) {
    case 1:
      return Tile4RowsAvx512<kType, 1>(w, ld_w, x, ld_x, n, y, ld_y);
    case 2:
      return Tile4RowsAvx512<kType, 2>(w, ld_w, x, ld_x, n, y, ld_y);
    case 3:
      return Tile4RowsAvx512<kType, 3>(w, ld_w, x, ld_x, n, y, ld_y);
    case 4:
      return Tile4RowsAvx512<kType, 4>(w, ld_w, x, ld_x, n, y, ld_y);
    case 5:
      return Tile4RowsAvx512<kType, 5>(w, ld_w, x, ld_x, n, y, ld_y);
    default:
      return Tile4RowsAvx512<kType, 6>(w, ld_w, x, ld_x, n, y, ld_y);
  }
}

template <DType kType>
PAGODA_AVX512 void WidenAvx512(const void* a, float* out, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, Load16<kType>(a, i));
  for (; i < n; ++i) out[i] = Load<kType>(a, i);
}

// Sixteen floats to bf16 bits, nearest even; NaN made quiet (FloatToBFloat16).
PAGODA_AVX512 inline __m256i ToBFloat16x16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet_nan));
}

template <DType kType>
PAGODA_AVX512 void NarrowAvx512(const float* a, void* out, size_t n) {
  if constexpr (kType == DType::kF32) {
    std::memcpy(out, a, n * sizeof(float));
  } else if constexpr (kType == DType::kFp8E4M3 || kType == DType::kFp8E5M2) {
    NarrowPlain<kType>(a, out, n);
  } else {
    auto* bits = static_cast<uint16_t*>(out);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512 v = _mm512_loadu_ps(a + i);
      const __m256i narrowed =
          kType == DType::kBF16 ? ToBFloat16x16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + i), narrowed);
    }
    NarrowPlain<kType>(a + i, bits + i, n - i);
  }
}

// As WeighStripAvx2, 16 columns a vector: 16 accumulators at 4 x 4 (a head
// of 64 in one strip), four x vectors and a broadcast, of 32 registers.
template <DType kType, int kRows, int kVecs>
PAGODA_AVX512 void WeighStripAvx512(const void* x, size_t ld_x, size_t keys, size_t c,
                                    const float* w, size_t ld_w, float* y, size_t ld_y) {
  __m512 acc[kRows][kVecs];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_loadu_ps(y + r * ld_y + c + 16 * v);
  }
  for (size_t j = 0; j < keys; ++j) {
    __m512 xv[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) xv[v] = Load16<kType>(x, j * ld_x + c + 16 * v);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m512 weight = _mm512_set1_ps(w[r * ld_w + j]);
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm512_fmadd_ps(weight, xv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) _mm512_storeu_ps(y + r * ld_y + c + 16 * v, acc[r][v]);
  }
}

// One row's 16 columns: one accumulator would chain every key's FMA on the
// one before it (four cycles each, most of decode's weighing at head_dim
// 16), so four keys in turn go to four accumulators, added to y at the end.
template <DType kType>
PAGODA_AVX512 void WeighStripOneRowAvx512(const void* x, size_t ld_x, size_t keys, size_t c,
                                          const float* w, float* y) {
  __m512 acc[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) acc[k] = _mm512_setzero_ps();
  size_t j = 0;
  for (; j + 4 <= keys; j += 4) {
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      acc[k] =
          _mm512_fmadd_ps(_mm512_set1_ps(w[j + k]), Load16<kType>(x, (j + k) * ld_x + c), acc[k]);
    }
  }
  for (; j < keys; ++j) {
    acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), Load16<kType>(x, j * ld_x + c), acc[0]);
  }
  const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
  _mm512_storeu_ps(y + c, _mm512_add_ps(_mm512_loadu_ps(y + c), sum));
}

template <DType kType, int kRows>
PAGODA_AVX512 void WeighRowsAvx512(const void* x, size_t ld_x, size_t keys, size_t n,
                                   const float* w, size_t ld_w, float* y, size_t ld_y) {
  size_t c = 0;
  if constexpr (kRows == 1) {
    if (n < 64) {
      for (; c + 16 <= n; c += 16) WeighStripOneRowAvx512<kType>(x, ld_x, keys, c, w, y);
    }
  }
  for (; c + 64 <= n; c += 64) {
    WeighStripAvx512<kType, kRows, 4>(x, ld_x, keys, c, w, ld_w, y, ld_y);
  }
  for (; c + 16 <= n; c += 16) {
    WeighStripAvx512<kType, kRows, 1>(x, ld_x, keys, c, w, ld_w, y, ld_y);
  }
  WeighColumnsPlain<kType>(x, ld_x, keys, c, n, w, ld_w, kRows, y, ld_y);
}

template <DType kType>
PAGODA_AVX512 void Weigh4Avx512(const void* x, size_t ld_x, size_t keys, size_t n, const float* w,
                                size_t ld_w, int rows, float* y, size_t ld_y) {
  switch (rows) {
    case 1:
      return WeighRowsAvx512<kType, 1>(x, ld_x, keys, n, w, ld_w, y, ld_y);
    case 2:
      return WeighRowsAvx512<kType, 2>(x, ld_x, keys, n, w, ld_w, y, ld_y);
    case 3:
      return WeighRowsAvx512<kType, 3>(x, ld_x, keys, n, w, ld_w, y, ld_y);
    default:
      return WeighRowsAvx512<kType, 4>(x, ld_x, keys, n, w, ld_w, y, ld_y);
  }
}

PAGODA_AVX512 void SiluMulAvx512(const float* gate, const float* up, float* out, size_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = ExpAvx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
  SiluMulPlain(gate + i, up + i, out + i, n - i);
}

// gemm6x16 at 16 lanes: a row's 16 columns are one vector, so a depth step
// is one panel load and a broadcast FMA per row. Two depth steps go to two
// sets of accumulators (even and odd k), 12 chains at six rows, since six
// alone wait on the FMA latency. The AVX2 kernel's two 8-wide halves per
// row took 13 % of the worker's samples on bench_async_scheduling.sh's
// model (hidden 64, every Linear below panel_linear_below_in_features).
template <int kRows>
PAGODA_AVX512 void Gemm16RowsAvx512(const float* panel, size_t ld_panel, size_t depth,
                                    const float* x, size_t ld_x, float* y, size_t ld_y, int cols,
                                    bool accumulate) {
  __m512 even[kRows], odd[kRows];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) even[r] = odd[r] = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + 2 <= depth; k += 2) {
    const __m512 w0 = _mm512_loadu_ps(panel + k * ld_panel);
    const __m512 w1 = _mm512_loadu_ps(panel + (k + 1) * ld_panel);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      even[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ld_x + k]), w0, even[r]);
      odd[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ld_x + k + 1]), w1, odd[r]);
    }
  }
  if (k < depth) {
    const __m512 w0 = _mm512_loadu_ps(panel + k * ld_panel);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      even[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ld_x + k]), w0, even[r]);
    }
  }
  const __mmask16 columns = static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    float* out = y + r * ld_y;
    __m512 sum = _mm512_add_ps(even[r], odd[r]);
    if (accumulate) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(columns, out));
    _mm512_mask_storeu_ps(out, columns, sum);
  }
}

PAGODA_AVX512 void Gemm6x16Avx512(const float* panel, size_t ld_panel, size_t depth, const float* x,
                                  size_t ld_x, int rows, float* y, size_t ld_y, int cols,
                                  bool accumulate) {
  switch (rows) {
    case 1:
      return Gemm16RowsAvx512<1>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 2:
      return Gemm16RowsAvx512<2>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 3:
      return Gemm16RowsAvx512<3>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 4:
      return Gemm16RowsAvx512<4>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 5:
      return Gemm16RowsAvx512<5>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    default:
      return Gemm16RowsAvx512<6>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
  }
}

// Decode's rows are a group's (4-8 query heads over one token); a prompt
// chunk of 4+ tokens has at least 16 at the usual group of 4.
constexpr int kAvx512BlockedAttentionMinRows = 16;
constexpr int64_t kAvx512PanelLinearBelowInFeatures = 256;
SimdKernels MakeAvx512Kernels(const SimdKernels& avx2) {
  return {DotAvx512<DType::kF32>, DotAvx512<DType::kBF16>, DotAvx512<DType::kF16>,
          DotAvx512<DType::kFp8E4M3>, DotAvx512<DType::kFp8E5M2>, Score4Avx512<DType::kF32>,
          Score4Avx512<DType::kBF16>, Score4Avx512<DType::kF16>, Score4Avx512<DType::kFp8E4M3>,
          Score4Avx512<DType::kFp8E5M2>, Tile4Avx512<DType::kF32>, Tile4Avx512<DType::kBF16>,
          Tile4Avx512<DType::kF16>, Tile4Avx512<DType::kFp8E4M3>, Tile4Avx512<DType::kFp8E5M2>,
          WidenAvx512<DType::kF32>, WidenAvx512<DType::kBF16>, WidenAvx512<DType::kF16>,
          WidenAvx512<DType::kFp8E4M3>, WidenAvx512<DType::kFp8E5M2>, NarrowAvx512<DType::kF32>,
          NarrowAvx512<DType::kBF16>, NarrowAvx512<DType::kF16>, NarrowAvx512<DType::kFp8E4M3>,
          NarrowAvx512<DType::kFp8E5M2>, Weigh4Avx512<DType::kF32>, Weigh4Avx512<DType::kBF16>,
          Weigh4Avx512<DType::kF16>, Weigh4Avx512<DType::kFp8E4M3>, Weigh4Avx512<DType::kFp8E5M2>,
          // The panel kernels, for attention and the Linear of small inputs:
          // AVX2's packing (valid here) and a 16-lane product.
          avx2.pack16_f32, avx2.pack16_bf16, avx2.pack16_f16, avx2.pack16_fp8e4m3,
          avx2.pack16_fp8e5m2, Gemm6x16Avx512,
          avx2.exp_sum,  // AVX2 code, valid at this level.
          SiluMulAvx512, ExpSumF64Avx512, ArgMaxAvx512, GumbelCandidatesAvx512,
          /*panel_linear_below_in_features=*/kAvx512PanelLinearBelowInFeatures,
          /*blocked_attention_min_rows=*/kAvx512BlockedAttentionMinRows,
          /*tile4_max_rows=*/6};
}

}  // namespace

const SimdKernels& Avx512Kernels() {
  // Built on first use, after Avx2Kernels' constant table exists.
  static const SimdKernels kernels = [] {
    SimdKernels table = MakeAvx512Kernels(Avx2Kernels());
    SetAttend16Avx512(table);
    return table;
  }();
  return kernels;
}

}  // namespace pagoda::worker::simd_internal
