#include "worker/cpu/simd.h"

#include <cpuid.h>
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* values
// the conversion intrinsics start from); the warning is about the header, not
// this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <cstring>

namespace pagoda::worker {
namespace {

// ---- plain x86-64: the reference every other level is tested against ----

template <DType kType>
inline float Load(const void* p, size_t i) {
  const auto* bits = static_cast<const uint16_t*>(p);
  if constexpr (kType == DType::kF32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (kType == DType::kBF16) {
    return BFloat16ToFloat(bits[i]);
  } else {
    return HalfToFloat(bits[i]);
  }
}

template <DType kType>
float DotPlain(const void* a, const float* b, size_t n) {
  // Four partial sums, like the SIMD paths, so rounding behaves alike.
  float sum[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) sum[k] += Load<kType>(a, i + k) * b[i + k];
  }
  for (; i < n; ++i) sum[0] += Load<kType>(a, i) * b[i];
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

template <DType kType>
void Score4Plain(const void* x, size_t ld_x, size_t keys, size_t n, const float* q, size_t ld_q,
                 int rows, float* s, size_t ld_s) {
  const size_t row_bytes = ld_x * DTypeSize(kType);
  for (size_t j = 0; j < keys; ++j) {
    const void* key = static_cast<const char*>(x) + j * row_bytes;
    for (int r = 0; r < rows; ++r) s[r * ld_s + j] = DotPlain<kType>(key, q + r * ld_q, n);
  }
}

template <DType kType>
void Tile4Plain(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n, int rows,
                float* y, size_t ld_y) {
  const auto* base = static_cast<const char*>(w);
  const size_t row_bytes = ld_w * DTypeSize(kType);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < 4; ++c) {
      y[r * ld_y + c] = DotPlain<kType>(base + c * row_bytes, x + r * ld_x, n);
    }
  }
}

template <DType kType>
void WidenPlain(const void* a, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Load<kType>(a, i);
}

template <DType kType>
void NarrowPlain(const float* a, void* out, size_t n) {
  if constexpr (kType == DType::kF32) {
    std::memcpy(out, a, n * sizeof(float));
  } else {
    auto* bits = static_cast<uint16_t*>(out);
    for (size_t i = 0; i < n; ++i) {
      bits[i] = kType == DType::kBF16 ? FloatToBFloat16(a[i]) : FloatToHalf(a[i]);
    }
  }
}

// Weigh4 over columns [begin, end): the reference, and the vector levels'
// tail.
template <DType kType>
void WeighColumnsPlain(const void* x, size_t ld_x, size_t keys, size_t begin, size_t end,
                       const float* w, size_t ld_w, int rows, float* y, size_t ld_y) {
  for (int r = 0; r < rows; ++r) {
    for (size_t i = begin; i < end; ++i) {
      float sum = y[r * ld_y + i];
      for (size_t j = 0; j < keys; ++j) sum += w[r * ld_w + j] * Load<kType>(x, j * ld_x + i);
      y[r * ld_y + i] = sum;
    }
  }
}

template <DType kType>
void Weigh4Plain(const void* x, size_t ld_x, size_t keys, size_t n, const float* w, size_t ld_w,
                 int rows, float* y, size_t ld_y) {
  WeighColumnsPlain<kType>(x, ld_x, keys, 0, n, w, ld_w, rows, y, ld_y);
}

// ---- AVX2 + FMA (+ F16C for half) ----

#define PAGODA_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType kType>
PAGODA_AVX2 inline __m256 Load8(const void* p, size_t i) {
  if constexpr (kType == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i raw =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (kType == DType::kBF16) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    } else {
      return _mm256_cvtph_ps(raw);
    }
  }
}

PAGODA_AVX2 inline float Sum8(__m256 v) {
  __m128 low = _mm256_castps256_ps128(v);
  __m128 high = _mm256_extractf128_ps(v, 1);
  low = _mm_add_ps(low, high);
  low = _mm_add_ps(low, _mm_movehl_ps(low, low));
  low = _mm_add_ss(low, _mm_shuffle_ps(low, low, 0x55));
  return _mm_cvtss_f32(low);
}

template <DType kType>
PAGODA_AVX2 float DotAvx2(const void* a, const float* b, size_t n) {
  // Four independent accumulators hide the FMA latency.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(Load8<kType>(a, i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(Load8<kType>(a, i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(Load8<kType>(a, i + 16), _mm256_loadu_ps(b + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(Load8<kType>(a, i + 24), _mm256_loadu_ps(b + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(Load8<kType>(a, i), _mm256_loadu_ps(b + i), acc0);
  }
  float sum = Sum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) sum += Load<kType>(a, i) * b[i];
  return sum;
}

template <DType kType>
PAGODA_AVX2 void Dot4Avx2(const void* a, const float* x, size_t ld_x, size_t n, float* out) {
  const float* x0 = x;
  const float* x1 = x + ld_x;
  const float* x2 = x + 2 * ld_x;
  const float* x3 = x + 3 * ld_x;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 w = Load8<kType>(a, i);
    acc0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x0 + i), acc0);
    acc1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x1 + i), acc1);
    acc2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x2 + i), acc2);
    acc3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x3 + i), acc3);
  }
  float sums[4] = {Sum8(acc0), Sum8(acc1), Sum8(acc2), Sum8(acc3)};
  for (; i < n; ++i) {
    const float w = Load<kType>(a, i);
    sums[0] += w * x0[i];
    sums[1] += w * x1[i];
    sums[2] += w * x2[i];
    sums[3] += w * x3[i];
  }
  for (int r = 0; r < 4; ++r) out[r] = sums[r];
}

// Odd head sizes only (others take the blocked attention at this level):
// a key at a time, its four heads sharing each load.
template <DType kType>
PAGODA_AVX2 void Score4Avx2(const void* x, size_t ld_x, size_t keys, size_t n, const float* q,
                            size_t ld_q, int rows, float* s, size_t ld_s) {
  const size_t row_bytes = ld_x * DTypeSize(kType);
  for (size_t j = 0; j < keys; ++j) {
    const void* key = static_cast<const char*>(x) + j * row_bytes;
    if (rows == 4) {
      float out[4];
      Dot4Avx2<kType>(key, q, ld_q, n, out);
      for (int r = 0; r < 4; ++r) s[r * ld_s + j] = out[r];
    } else {
      for (int r = 0; r < rows; ++r) s[r * ld_s + j] = DotAvx2<kType>(key, q + r * ld_q, n);
    }
  }
}

// One token: the four weight rows one after another, each dotted as one
// sequential stream with a prefetch a fixed distance ahead in it. The rows
// of a group are adjacent, so a thread reads its share of a matrix front to
// back. On this project's AVX2 VM (Zen 3), in interleaved rounds of one
// process, this ran a batch-1 b1 step 20-45% faster than reading the four
// rows side by side with a prefetch of the next group (f32 median 6.4 against
// 7.6 ms, bf16 2.1 against 4.3 ms, f16 2.2 against 4.7 ms under load); the
// distance, 512 B for f32 and 1 KiB for 16-bit weights, was the best of
// 256 B to 1.5 KiB tried.
template <DType kType>
PAGODA_AVX2 void Tile4OneTokenAvx2(const void* w, size_t ld_w, const float* x, size_t n, float* y) {
  constexpr size_t kWidth = DTypeSize(kType);
  constexpr size_t kAhead = kType == DType::kF32 ? 512 : 1024;
  const auto* base = static_cast<const char*>(w);
  for (int c = 0; c < 4; ++c) {
    const char* row = base + c * ld_w * kWidth;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      // 32 elements: two cache lines of f32, one of 16-bit weights.
      const char* ahead = row + i * kWidth + kAhead;
      _mm_prefetch(ahead, _MM_HINT_T0);
      if constexpr (kWidth == 4) _mm_prefetch(ahead + 64, _MM_HINT_T0);
      acc0 = _mm256_fmadd_ps(Load8<kType>(row, i), _mm256_loadu_ps(x + i), acc0);
      acc1 = _mm256_fmadd_ps(Load8<kType>(row, i + 8), _mm256_loadu_ps(x + i + 8), acc1);
      acc2 = _mm256_fmadd_ps(Load8<kType>(row, i + 16), _mm256_loadu_ps(x + i + 16), acc2);
      acc3 = _mm256_fmadd_ps(Load8<kType>(row, i + 24), _mm256_loadu_ps(x + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) {
      acc0 = _mm256_fmadd_ps(Load8<kType>(row, i), _mm256_loadu_ps(x + i), acc0);
    }
    float sum = Sum8(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) sum += Load<kType>(row, i) * x[i];
    y[c] = sum;
  }
}

// Several tokens: a 4-output-feature by kRows-token tile, kRows * 4
// accumulators, kRows token vectors and one weight vector (16 registers at
// kRows = 3). The tile reuses each weight slice from L1 and L2, so its rows
// are fetched two groups ahead into every level.
template <DType kType, int kRows>
PAGODA_AVX2 void Tile4RowsAvx2(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n,
                               float* y, size_t ld_y) {
  const auto* base = static_cast<const char*>(w);
  const size_t row_bytes = ld_w * DTypeSize(kType);
  const char* rows_w[4] = {base, base + row_bytes, base + 2 * row_bytes, base + 3 * row_bytes};
  const size_t prefetch = 8 * row_bytes;
  __m256 acc[kRows][4];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 xv[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) xv[r] = _mm256_loadu_ps(x + r * ld_x + i);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256 wv = Load8<kType>(rows_w[c], i);
      _mm_prefetch(rows_w[c] + i * DTypeSize(kType) + prefetch, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) acc[r][c] = _mm256_fmadd_ps(wv, xv[r], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    float sums[4] = {Sum8(acc[r][0]), Sum8(acc[r][1]), Sum8(acc[r][2]), Sum8(acc[r][3])};
    const float* xr = x + r * ld_x;
    for (size_t k = i; k < n; ++k) {
      for (int c = 0; c < 4; ++c) sums[c] += Load<kType>(rows_w[c], k) * xr[k];
    }
    for (int c = 0; c < 4; ++c) y[r * ld_y + c] = sums[c];
  }
}

template <DType kType>
PAGODA_AVX2 void Tile4Avx2(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n,
                           int rows, float* y, size_t ld_y) {
  switch (rows) {
    case 1:
      return Tile4OneTokenAvx2<kType>(w, ld_w, x, n, y);
    case 2:
      return Tile4RowsAvx2<kType, 2>(w, ld_w, x, ld_x, n, y, ld_y);
    case 3:
      return Tile4RowsAvx2<kType, 3>(w, ld_w, x, ld_x, n, y, ld_y);
    default:  // Four rows would need 21 registers: two tiles of two.
      Tile4RowsAvx2<kType, 2>(w, ld_w, x, ld_x, n, y, ld_y);
      return Tile4RowsAvx2<kType, 2>(w, ld_w, x + 2 * ld_x, ld_x, n, y + 2 * ld_y, ld_y);
  }
}

// In-register transpose of eight rows of eight floats.
PAGODA_AVX2 inline void Transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Eight-by-eight blocks: eight weight rows' next eight elements, widened,
// transposed into eight depth rows of the panel.
template <DType kType>
PAGODA_AVX2 void Pack16Avx2(const void* w, size_t ld_w, int cols, size_t depth, float* packed) {
  const size_t row_bytes = ld_w * DTypeSize(kType);
  const char* base = static_cast<const char*>(w);
  size_t k = 0;
  for (; k + 8 <= depth; k += 8) {
    for (int half = 0; half < 2; ++half) {
      __m256 block[8];
      for (int c = 0; c < 8; ++c) {
        const int col = half * 8 + c;
        block[c] = col < cols ? Load8<kType>(base + col * row_bytes, k) : _mm256_setzero_ps();
      }
      Transpose8x8(block);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(packed + (k + i) * 16 + half * 8, block[i]);
    }
  }
  for (; k < depth; ++k) {
    for (int c = 0; c < 16; ++c) {
      packed[k * 16 + c] = c < cols ? Load<kType>(base + c * row_bytes, k) : 0.0f;
    }
  }
}

// kRows x 16 accumulators (12 at six rows), two panel vectors and one
// broadcast token element: 15 of AVX2's 16 registers. Each panel load serves
// kRows broadcasts, each broadcast two FMAs.
template <int kRows>
PAGODA_AVX2 void Gemm16RowsAvx2(const float* panel, size_t ld_panel, size_t depth, const float* x,
                                size_t ld_x, float* y, size_t ld_y, int cols, bool accumulate) {
  __m256 acc[kRows][2];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (size_t k = 0; k < depth; ++k) {
    const __m256 w0 = _mm256_loadu_ps(panel + k * ld_panel);
    const __m256 w1 = _mm256_loadu_ps(panel + k * ld_panel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256 b = _mm256_broadcast_ss(x + r * ld_x + k);
      acc[r][0] = _mm256_fmadd_ps(b, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(b, w1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    float* out = y + r * ld_y;
    if (cols == 16) {
      if (accumulate) {
        acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(out));
        acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(out + 8));
      }
      _mm256_storeu_ps(out, acc[r][0]);
      _mm256_storeu_ps(out + 8, acc[r][1]);
      continue;
    }
    alignas(32) float row[16];
    _mm256_store_ps(row, acc[r][0]);
    _mm256_store_ps(row + 8, acc[r][1]);
    for (int c = 0; c < cols; ++c) out[c] = accumulate ? out[c] + row[c] : row[c];
  }
}

PAGODA_AVX2 void Gemm6x16Avx2(const float* panel, size_t ld_panel, size_t depth, const float* x,
                              size_t ld_x, int rows, float* y, size_t ld_y, int cols,
                              bool accumulate) {
  switch (rows) {
    case 1:
      return Gemm16RowsAvx2<1>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 2:
      return Gemm16RowsAvx2<2>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 3:
      return Gemm16RowsAvx2<3>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 4:
      return Gemm16RowsAvx2<4>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    case 5:
      return Gemm16RowsAvx2<5>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
    default:
      return Gemm16RowsAvx2<6>(panel, ld_panel, depth, x, ld_x, y, ld_y, cols, accumulate);
  }
}

// e^x for 8 lanes as ExpAvx512 below, with 2^n built in the exponent bits
// (AVX2 has no scalef): x is clamped to [-87, 88.3], where n stays a normal
// exponent, and lanes below -87 (e^x < 1.7e-38, -inf included) give 0.
PAGODA_AVX2 inline __m256 ExpAvx2(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(exponent)));
}

PAGODA_AVX2 float ExpSumAvx2(const float* in, float shift, float* out, size_t n) {
  const __m256 shift_v = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ExpAvx2(_mm256_sub_ps(_mm256_loadu_ps(in + i), shift_v));
    _mm256_storeu_ps(out + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {  // The tail through a masked load: -inf past the end gives 0.
    alignas(32) float tail[8];
    for (int k = 0; k < 8; ++k) tail[k] = i + k < n ? in[i + k] - shift : -INFINITY;
    const __m256 e = ExpAvx2(_mm256_load_ps(tail));
    _mm256_store_ps(tail, e);
    for (size_t k = 0; i + k < n; ++k) out[i + k] = tail[k];
    sum = _mm256_add_ps(sum, e);
  }
  return Sum8(sum);
}

void SiluMulPlain(const float* gate, const float* up, float* out, size_t n);

PAGODA_AVX2 void SiluMulAvx2(const float* gate, const float* up, float* out, size_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = ExpAvx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  SiluMulPlain(gate + i, up + i, out + i, n - i);
}

template <DType kType>
PAGODA_AVX2 void WidenAvx2(const void* a, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Load8<kType>(a, i));
  for (; i < n; ++i) out[i] = Load<kType>(a, i);
}

// Eight floats to bf16 bits, nearest even; NaN made quiet (FloatToBFloat16).
PAGODA_AVX2 inline __m128i ToBFloat16x8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i out = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // Pack the low 16 bits of each 32-bit lane, in order.
  const __m256i packed = _mm256_packus_epi32(out, out);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

template <DType kType>
PAGODA_AVX2 void NarrowAvx2(const float* a, void* out, size_t n) {
  if constexpr (kType == DType::kF32) {
    std::memcpy(out, a, n * sizeof(float));
  } else {
    auto* bits = static_cast<uint16_t*>(out);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(a + i);
      const __m128i narrowed =
          kType == DType::kBF16 ? ToBFloat16x8(v) : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i), narrowed);
    }
    NarrowPlain<kType>(a + i, bits + i, n - i);
  }
}

// Columns [c, c + 8 * kVecs) of kRows rows over every key: kRows * kVecs
// accumulators (8 at 4 x 2), kVecs widened x vectors, one broadcast weight.
template <DType kType, int kRows, int kVecs>
PAGODA_AVX2 void WeighStripAvx2(const void* x, size_t ld_x, size_t keys, size_t c, const float* w,
                                size_t ld_w, float* y, size_t ld_y) {
  __m256 acc[kRows][kVecs];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_loadu_ps(y + r * ld_y + c + 8 * v);
  }
  for (size_t j = 0; j < keys; ++j) {
    __m256 xv[kVecs];
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) xv[v] = Load8<kType>(x, j * ld_x + c + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 weight = _mm256_broadcast_ss(w + r * ld_w + j);
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) acc[r][v] = _mm256_fmadd_ps(weight, xv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(y + r * ld_y + c + 8 * v, acc[r][v]);
  }
}

template <DType kType, int kRows>
PAGODA_AVX2 void WeighRowsAvx2(const void* x, size_t ld_x, size_t keys, size_t n, const float* w,
                               size_t ld_w, float* y, size_t ld_y) {
  size_t c = 0;
  for (; c + 16 <= n; c += 16) WeighStripAvx2<kType, kRows, 2>(x, ld_x, keys, c, w, ld_w, y, ld_y);
  for (; c + 8 <= n; c += 8) WeighStripAvx2<kType, kRows, 1>(x, ld_x, keys, c, w, ld_w, y, ld_y);
  WeighColumnsPlain<kType>(x, ld_x, keys, c, n, w, ld_w, kRows, y, ld_y);
}

template <DType kType>
PAGODA_AVX2 void Weigh4Avx2(const void* x, size_t ld_x, size_t keys, size_t n, const float* w,
                            size_t ld_w, int rows, float* y, size_t ld_y) {
  switch (rows) {
    case 1:
      return WeighRowsAvx2<kType, 1>(x, ld_x, keys, n, w, ld_w, y, ld_y);
    case 2:
      return WeighRowsAvx2<kType, 2>(x, ld_x, keys, n, w, ld_w, y, ld_y);
    case 3:
      return WeighRowsAvx2<kType, 3>(x, ld_x, keys, n, w, ld_w, y, ld_y);
    default:
      return WeighRowsAvx2<kType, 4>(x, ld_x, keys, n, w, ld_w, y, ld_y);
  }
}

// ---- AVX-512F ----

#define PAGODA_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

template <DType kType>
PAGODA_AVX512 inline __m512 Load16(const void* p, size_t i) {
  if constexpr (kType == DType::kF32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
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

template <DType kType, int kRows>
PAGODA_AVX512 void ScoreRowsAvx512(const void* x, size_t ld_x, size_t keys, size_t n,
                                   const float* q, size_t ld_q, float* s, size_t ld_s) {
  size_t j = 0;
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
#pragma GCC unroll 4
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
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m512 xv = _mm512_loadu_ps(x + r * ld_x + i);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
    }
  }
#pragma GCC unroll 4
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
    default:
      return Tile4RowsAvx512<kType, 4>(w, ld_w, x, ld_x, n, y, ld_y);
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

template <DType kType, int kRows>
PAGODA_AVX512 void WeighRowsAvx512(const void* x, size_t ld_x, size_t keys, size_t n,
                                   const float* w, size_t ld_w, float* y, size_t ld_y) {
  size_t c = 0;
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

float ExpSumPlain(const float* in, float shift, float* out, size_t n) {
  float sum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::exp(in[i] - shift);
    sum += out[i];
  }
  return sum;
}

void SiluMulPlain(const float* gate, const float* up, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
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

constexpr SimdKernels kPlainKernels = {DotPlain<DType::kF32>,
                                       DotPlain<DType::kBF16>,
                                       DotPlain<DType::kF16>,
                                       Score4Plain<DType::kF32>,
                                       Score4Plain<DType::kBF16>,
                                       Score4Plain<DType::kF16>,
                                       Tile4Plain<DType::kF32>,
                                       Tile4Plain<DType::kBF16>,
                                       Tile4Plain<DType::kF16>,
                                       WidenPlain<DType::kF32>,
                                       WidenPlain<DType::kBF16>,
                                       WidenPlain<DType::kF16>,
                                       NarrowPlain<DType::kF32>,
                                       NarrowPlain<DType::kBF16>,
                                       NarrowPlain<DType::kF16>,
                                       Weigh4Plain<DType::kF32>,
                                       Weigh4Plain<DType::kBF16>,
                                       Weigh4Plain<DType::kF16>,
                                       nullptr,
                                       nullptr,
                                       nullptr,
                                       nullptr,
                                       ExpSumPlain,
                                       SiluMulPlain};
constexpr SimdKernels kAvx2Kernels = {DotAvx2<DType::kF32>,
                                      DotAvx2<DType::kBF16>,
                                      DotAvx2<DType::kF16>,
                                      Score4Avx2<DType::kF32>,
                                      Score4Avx2<DType::kBF16>,
                                      Score4Avx2<DType::kF16>,
                                      Tile4Avx2<DType::kF32>,
                                      Tile4Avx2<DType::kBF16>,
                                      Tile4Avx2<DType::kF16>,
                                      WidenAvx2<DType::kF32>,
                                      WidenAvx2<DType::kBF16>,
                                      WidenAvx2<DType::kF16>,
                                      NarrowAvx2<DType::kF32>,
                                      NarrowAvx2<DType::kBF16>,
                                      NarrowAvx2<DType::kF16>,
                                      Weigh4Avx2<DType::kF32>,
                                      Weigh4Avx2<DType::kBF16>,
                                      Weigh4Avx2<DType::kF16>,
                                      Pack16Avx2<DType::kF32>,
                                      Pack16Avx2<DType::kBF16>,
                                      Pack16Avx2<DType::kF16>,
                                      Gemm6x16Avx2,
                                      ExpSumAvx2,
                                      SiluMulAvx2};
// Decode's rows are a group's (4-8 query heads over one token); a prompt
// chunk of 4+ tokens has at least 16 at the usual group of 4.
constexpr int kAvx512BlockedAttentionMinRows = 16;
constexpr int64_t kAvx512PanelLinearBelowInFeatures = 256;
constexpr SimdKernels kAvx512Kernels = {
    DotAvx512<DType::kF32>, DotAvx512<DType::kBF16>, DotAvx512<DType::kF16>,
    Score4Avx512<DType::kF32>, Score4Avx512<DType::kBF16>, Score4Avx512<DType::kF16>,
    Tile4Avx512<DType::kF32>, Tile4Avx512<DType::kBF16>, Tile4Avx512<DType::kF16>,
    WidenAvx512<DType::kF32>, WidenAvx512<DType::kBF16>, WidenAvx512<DType::kF16>,
    NarrowAvx512<DType::kF32>, NarrowAvx512<DType::kBF16>, NarrowAvx512<DType::kF16>,
    Weigh4Avx512<DType::kF32>, Weigh4Avx512<DType::kBF16>, Weigh4Avx512<DType::kF16>,
    // The panel kernels: AVX2 code, valid here, for attention and the Linear
    // of small inputs.
    Pack16Avx2<DType::kF32>, Pack16Avx2<DType::kBF16>, Pack16Avx2<DType::kF16>, Gemm6x16Avx2,
    ExpSumAvx2,  // AVX2 code, valid at this level.
    SiluMulAvx512,
    /*panel_linear_below_in_features=*/kAvx512PanelLinearBelowInFeatures,
    /*blocked_attention_min_rows=*/kAvx512BlockedAttentionMinRows};

}  // namespace

std::string_view SimdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPlain:
      return "plain";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "unknown";
}

namespace {

// F16C from CPUID leaf 1: clang's __builtin_cpu_supports has no "f16c".
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace

std::vector<SimdLevel> SupportedSimdLevels() {
  std::vector<SimdLevel> levels = {SimdLevel::kPlain};
  __builtin_cpu_init();
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c();
  if (avx2) levels.push_back(SimdLevel::kAvx2);
  if (avx2 && __builtin_cpu_supports("avx512f")) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

SimdLevel BestSimdLevel() { return SupportedSimdLevels().back(); }

SimdKernels::DotFn SimdKernels::dot(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return dot_bf16;
    case DType::kF16:
      return dot_f16;
    case DType::kF32:
      break;
  }
  return dot_f32;
}

SimdKernels::Score4Fn SimdKernels::score4(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return score4_bf16;
    case DType::kF16:
      return score4_f16;
    case DType::kF32:
      break;
  }
  return score4_f32;
}

SimdKernels::Tile4Fn SimdKernels::tile4(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return tile4_bf16;
    case DType::kF16:
      return tile4_f16;
    case DType::kF32:
      break;
  }
  return tile4_f32;
}

SimdKernels::WidenFn SimdKernels::widen(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return widen_bf16;
    case DType::kF16:
      return widen_f16;
    case DType::kF32:
      break;
  }
  return widen_f32;
}

SimdKernels::NarrowFn SimdKernels::narrow(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return narrow_bf16;
    case DType::kF16:
      return narrow_f16;
    case DType::kF32:
      break;
  }
  return narrow_f32;
}

SimdKernels::Weigh4Fn SimdKernels::weigh4(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return weigh4_bf16;
    case DType::kF16:
      return weigh4_f16;
    case DType::kF32:
      break;
  }
  return weigh4_f32;
}

SimdKernels::Pack16Fn SimdKernels::pack16(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return pack16_bf16;
    case DType::kF16:
      return pack16_f16;
    case DType::kF32:
      break;
  }
  return pack16_f32;
}

const SimdKernels& SimdKernelsFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return kAvx512Kernels;
    case SimdLevel::kAvx2:
      return kAvx2Kernels;
    case SimdLevel::kPlain:
      break;
  }
  return kPlainKernels;
}

const SimdKernels& BestSimdKernels() {
  static const SimdKernels& best = SimdKernelsFor(BestSimdLevel());
  return best;
}

}  // namespace pagoda::worker
