// The AVX2 + FMA (+ F16C for half) level of the CPU kernels, compiled for
// that target function by function (the binary runs on plain x86-64): its
// panel kernels also serve the AVX-512 level.

#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 headers (the _mm512_undefined_* values
// the conversion intrinsics start from); the warning is about the header, not
// this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cmath>
#include <cstring>

#include "worker/cpu/fp8_simd.h"
#include "worker/cpu/simd_levels.h"

namespace pagoda::worker::simd_internal {
namespace {

#define PAGODA_AVX2 __attribute__((target("avx2,fma,f16c")))

template <DType kType>
PAGODA_AVX2 inline __m256 Load8(const void* p, size_t i) {
  if constexpr (kType == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else if constexpr (kType == DType::kFp8E4M3) {
    // Times 2^8 (exact) back to the code's value, so every kernel sees the
    // values the plain level's table gives.
    return _mm256_mul_ps(fp8_simd::E4M3x8ToFloatTimes2m8(static_cast<const uint8_t*>(p) + i),
                         _mm256_set1_ps(256.0f));
  } else if constexpr (kType == DType::kFp8E5M2) {
    return fp8_simd::E5M2x8ToFloat(static_cast<const uint8_t*>(p) + i);
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

// Several tokens: a 4-output-feature by kRows-token tile whose every
// output adds its products in Tile4OneTokenAvx2's order (four accumulators
// over 32-element blocks, the 8-element rest into the first, then the scalar
// tail), so that a speculative verify step's rows, when they fit one tile,
// give the very floats of one-row decode steps (RowsOfOneTileEqualOneRow-
// StepsBitForBit in linear_test.cc; a tile with one accumulator per output,
// as at AVX-512, differed from the one-token order in the last bits). The
// weight rows are streamed one after another, as in the one-token kernel,
// each 8-element load serving the kRows token rows (kRows * 4 accumulators,
// 14 registers at kRows = 3); the token rows are read again for each weight
// row, from L1 or L2.
template <DType kType, int kRows>
PAGODA_AVX2 void Tile4RowsAvx2(const void* w, size_t ld_w, const float* x, size_t ld_x, size_t n,
                               float* y, size_t ld_y) {
  constexpr size_t kWidth = DTypeSize(kType);
  constexpr size_t kAhead = kType == DType::kF32 ? 512 : 1024;
  const auto* base = static_cast<const char*>(w);
  for (int c = 0; c < 4; ++c) {
    const char* row = base + c * ld_w * kWidth;
    __m256 acc[kRows][4];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm256_setzero_ps();
    }
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const char* ahead = row + i * kWidth + kAhead;
      _mm_prefetch(ahead, _MM_HINT_T0);
      if constexpr (kWidth == 4) _mm_prefetch(ahead + 64, _MM_HINT_T0);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m256 wv = Load8<kType>(row, i + 8 * j);
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          acc[r][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * ld_x + i + 8 * j), acc[r][j]);
        }
      }
    }
    for (; i + 8 <= n; i += 8) {
      const __m256 wv = Load8<kType>(row, i);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        acc[r][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * ld_x + i), acc[r][0]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const float* xr = x + r * ld_x;
      float sum = Sum8(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]),
                                     _mm256_add_ps(acc[r][2], acc[r][3])));
      for (size_t k = i; k < n; ++k) sum += Load<kType>(row, k) * xr[k];
      y[r * ld_y + c] = sum;
    }
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
    default:  // Four rows would need 18 registers: two tiles of two.
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
  } else if constexpr (kType == DType::kFp8E4M3 || kType == DType::kFp8E5M2) {
    NarrowPlain<kType>(a, out, n);
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

constexpr SimdKernels kAvx2Kernels = {DotAvx2<DType::kF32>,
                                      DotAvx2<DType::kBF16>,
                                      DotAvx2<DType::kF16>,
                                      DotAvx2<DType::kFp8E4M3>,
                                      DotAvx2<DType::kFp8E5M2>,
                                      Score4Avx2<DType::kF32>,
                                      Score4Avx2<DType::kBF16>,
                                      Score4Avx2<DType::kF16>,
                                      Score4Avx2<DType::kFp8E4M3>,
                                      Score4Avx2<DType::kFp8E5M2>,
                                      Tile4Avx2<DType::kF32>,
                                      Tile4Avx2<DType::kBF16>,
                                      Tile4Avx2<DType::kF16>,
                                      Tile4Avx2<DType::kFp8E4M3>,
                                      Tile4Avx2<DType::kFp8E5M2>,
                                      WidenAvx2<DType::kF32>,
                                      WidenAvx2<DType::kBF16>,
                                      WidenAvx2<DType::kF16>,
                                      WidenAvx2<DType::kFp8E4M3>,
                                      WidenAvx2<DType::kFp8E5M2>,
                                      NarrowAvx2<DType::kF32>,
                                      NarrowAvx2<DType::kBF16>,
                                      NarrowAvx2<DType::kF16>,
                                      NarrowAvx2<DType::kFp8E4M3>,
                                      NarrowAvx2<DType::kFp8E5M2>,
                                      Weigh4Avx2<DType::kF32>,
                                      Weigh4Avx2<DType::kBF16>,
                                      Weigh4Avx2<DType::kF16>,
                                      Weigh4Avx2<DType::kFp8E4M3>,
                                      Weigh4Avx2<DType::kFp8E5M2>,
                                      Pack16Avx2<DType::kF32>,
                                      Pack16Avx2<DType::kBF16>,
                                      Pack16Avx2<DType::kF16>,
                                      Pack16Avx2<DType::kFp8E4M3>,
                                      Pack16Avx2<DType::kFp8E5M2>,
                                      Gemm6x16Avx2,
                                      ExpSumAvx2,
                                      SiluMulAvx2,
                                      ExpSumF64Avx2,
                                      ArgMaxAvx2,
                                      GumbelCandidatesAvx2};

}  // namespace

const SimdKernels& Avx2Kernels() { return kAvx2Kernels; }

}  // namespace pagoda::worker::simd_internal
