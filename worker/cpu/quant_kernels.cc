#include "worker/cpu/quant_kernels.h"

#include <immintrin.h>

// As in simd.cc: GCC 12 warns inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::worker {
namespace {

// Code i of a 4-bit chunked row (see quant_kernels.h).
inline int Int4Code(const uint8_t* codes, int64_t i) {
  const uint8_t byte = codes[(i / kQuantChunk) * (kQuantChunk / 2) + (i % (kQuantChunk / 2))];
  return (i % kQuantChunk) < kQuantChunk / 2 ? (byte & 0xF) : (byte >> 4);
}

template <int kBits>
void RowPlain(const uint8_t* codes, const float* params, const QuantSegment* segments,
              int num_segments, const float* x, size_t ld_x, const float* xsum, size_t ld_s,
              int rows, float* y, size_t ld_y, bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    const float* xr = x + r * ld_x;
    float total = 0.0f;
    for (int s = 0; s < num_segments; ++s) {
      const QuantSegment& seg = segments[s];
      float dot = 0.0f;
      for (int64_t i = seg.start; i < seg.start + seg.length; ++i) {
        const int code = kBits == 4 ? Int4Code(codes, i) : codes[i];
        dot += static_cast<float>(code) * xr[i];
      }
      total += params[2 * seg.group] * dot + params[2 * seg.group + 1] * xsum[r * ld_s + s];
    }
    y[r * ld_y] = (accumulate ? y[r * ld_y] : 0.0f) + total;
  }
}

#define PAGODA_AVX2 __attribute__((target("avx2,fma")))

PAGODA_AVX2 inline float HorizontalSum(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_shuffle_ps(sum2, sum2, 1)));
}

PAGODA_AVX2 inline __m256 Widen8(__m128i bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
}

// The 32 codes of one chunk as four vectors of 8, in input order.
template <int kBits>
PAGODA_AVX2 inline void ChunkAvx2(const uint8_t* codes, int64_t start, __m256 w[4]) {
  if constexpr (kBits == 4) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + start / 2));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_and_si128(bytes, mask);
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    w[0] = Widen8(low);
    w[1] = Widen8(_mm_srli_si128(low, 8));
    w[2] = Widen8(high);
    w[3] = Widen8(_mm_srli_si128(high, 8));
  } else {
    for (int q = 0; q < 4; ++q) {
      w[q] = Widen8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + start + 8 * q)));
    }
  }
}

template <int kBits, int kRows>
PAGODA_AVX2 void RowsAvx2(const uint8_t* codes, const float* params, const QuantSegment* segments,
                          int num_segments, const float* x, size_t ld_x, const float* xsum,
                          size_t ld_s, float* y, size_t ld_y, bool accumulate) {
  __m256 total[kRows];
  float offset[kRows];
  for (int r = 0; r < kRows; ++r) {
    total[r] = _mm256_setzero_ps();
    offset[r] = 0.0f;
  }
  for (int s = 0; s < num_segments; ++s) {
    const QuantSegment& seg = segments[s];
    // Two independent sums a row: half the FMA latency chain.
    __m256 acc[kRows][2];
    for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t i = seg.start; i < seg.start + seg.length; i += kQuantChunk) {
      __m256 w[4];
      ChunkAvx2<kBits>(codes, i, w);
      for (int r = 0; r < kRows; ++r) {
        const float* xr = x + r * ld_x + i;
        for (int q = 0; q < 4; ++q) {
          acc[r][q & 1] = _mm256_fmadd_ps(w[q], _mm256_loadu_ps(xr + 8 * q), acc[r][q & 1]);
        }
      }
    }
    const __m256 scale = _mm256_set1_ps(params[2 * seg.group]);
    for (int r = 0; r < kRows; ++r) {
      total[r] = _mm256_fmadd_ps(scale, _mm256_add_ps(acc[r][0], acc[r][1]), total[r]);
      offset[r] += params[2 * seg.group + 1] * xsum[r * ld_s + s];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    y[r * ld_y] = (accumulate ? y[r * ld_y] : 0.0f) + HorizontalSum(total[r]) + offset[r];
  }
}

template <int kBits>
PAGODA_AVX2 void RowAvx2(const uint8_t* codes, const float* params, const QuantSegment* segments,
                         int num_segments, const float* x, size_t ld_x, const float* xsum,
                         size_t ld_s, int rows, float* y, size_t ld_y, bool accumulate) {
  switch (rows) {
    case 1:
      return RowsAvx2<kBits, 1>(codes, params, segments, num_segments, x, ld_x, xsum, ld_s, y, ld_y,
                                accumulate);
    case 2:
      return RowsAvx2<kBits, 2>(codes, params, segments, num_segments, x, ld_x, xsum, ld_s, y, ld_y,
                                accumulate);
    case 3:
      return RowsAvx2<kBits, 3>(codes, params, segments, num_segments, x, ld_x, xsum, ld_s, y, ld_y,
                                accumulate);
    default:
      return RowsAvx2<kBits, 4>(codes, params, segments, num_segments, x, ld_x, xsum, ld_s, y, ld_y,
                                accumulate);
  }
}

#define PAGODA_AVX512 __attribute__((target("avx512f,avx2,fma")))

// The 32 codes of one chunk as two vectors of 16, in input order.
template <int kBits>
PAGODA_AVX512 inline void ChunkAvx512(const uint8_t* codes, int64_t start, __m512 w[2]) {
  if constexpr (kBits == 4) {
    // Each byte widened to a dword; vpermps reads only an index's low four
    // bits, so the codes' values come from a table of 0..15 without masking
    // or converting: three 512-bit ops for 32 codes where and, widen and
    // convert took six, the ports the FMAs need.
    const __m512 values = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i bytes = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + start / 2)));
    w[0] = _mm512_permutexvar_ps(bytes, values);
    w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), values);
  } else {
    for (int q = 0; q < 2; ++q) {
      w[q] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + start + 16 * q))));
    }
  }
}

// kRows token rows (1..8) of one weight row. Each row keeps kAcc
// independent accumulators (four for one or two rows, so the FMA latency is
// hidden at decode; two from three rows on, where the rows themselves give
// the independence and 32 registers must hold them all), scaled into `total`
// once per segment.
template <int kBits, int kRows>
PAGODA_AVX512 void RowsAvx512(const uint8_t* codes, const float* params,
                              const QuantSegment* segments, int num_segments, const float* x,
                              size_t ld_x, const float* xsum, size_t ld_s, float* y, size_t ld_y,
                              bool accumulate) {
  constexpr int kAcc = kRows <= 2 ? 4 : 2;
  __m512 total[kRows];
  float offset[kRows];
  for (int r = 0; r < kRows; ++r) {
    total[r] = _mm512_setzero_ps();
    offset[r] = 0.0f;
  }
  for (int s = 0; s < num_segments; ++s) {
    const QuantSegment& seg = segments[s];
    __m512 acc[kRows][kAcc];
    for (int r = 0; r < kRows; ++r) {
      for (int a = 0; a < kAcc; ++a) acc[r][a] = _mm512_setzero_ps();
    }
    const int64_t end = seg.start + seg.length;
    int64_t i = seg.start;
    if constexpr (kAcc == 4) {
      for (; i + 2 * kQuantChunk <= end; i += 2 * kQuantChunk) {
        __m512 w[4];
        ChunkAvx512<kBits>(codes, i, w);
        ChunkAvx512<kBits>(codes, i + kQuantChunk, w + 2);
        for (int r = 0; r < kRows; ++r) {
          const float* xr = x + r * ld_x + i;
          for (int a = 0; a < 4; ++a) {
            acc[r][a] = _mm512_fmadd_ps(w[a], _mm512_loadu_ps(xr + 16 * a), acc[r][a]);
          }
        }
      }
    }
    for (; i < end; i += kQuantChunk) {
      __m512 w[2];
      ChunkAvx512<kBits>(codes, i, w);
      for (int r = 0; r < kRows; ++r) {
        const float* xr = x + r * ld_x + i;
        acc[r][0] = _mm512_fmadd_ps(w[0], _mm512_loadu_ps(xr), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(xr + 16), acc[r][1]);
      }
    }
    const __m512 scale = _mm512_set1_ps(params[2 * seg.group]);
    for (int r = 0; r < kRows; ++r) {
      __m512 sum = _mm512_add_ps(acc[r][0], acc[r][1]);
      if constexpr (kAcc == 4) sum = _mm512_add_ps(sum, _mm512_add_ps(acc[r][2], acc[r][3]));
      total[r] = _mm512_fmadd_ps(scale, sum, total[r]);
      offset[r] += params[2 * seg.group + 1] * xsum[r * ld_s + s];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    y[r * ld_y] = (accumulate ? y[r * ld_y] : 0.0f) + _mm512_reduce_add_ps(total[r]) + offset[r];
  }
}

template <int kBits>
PAGODA_AVX512 void RowAvx512(const uint8_t* codes, const float* params,
                             const QuantSegment* segments, int num_segments, const float* x,
                             size_t ld_x, const float* xsum, size_t ld_s, int rows, float* y,
                             size_t ld_y, bool accumulate) {
#define PAGODA_ROWS_CASE(n)                                                                    \
  case n:                                                                                      \
    return RowsAvx512<kBits, n>(codes, params, segments, num_segments, x, ld_x, xsum, ld_s, y, \
                                ld_y, accumulate);
  switch (rows) {
    PAGODA_ROWS_CASE(1)
    PAGODA_ROWS_CASE(2)
    PAGODA_ROWS_CASE(3)
    PAGODA_ROWS_CASE(4)
    PAGODA_ROWS_CASE(5)
    PAGODA_ROWS_CASE(6)
    PAGODA_ROWS_CASE(7)
    default:
      return RowsAvx512<kBits, 8>(codes, params, segments, num_segments, x, ld_x, xsum, ld_s, y,
                                  ld_y, accumulate);
  }
#undef PAGODA_ROWS_CASE
}

constexpr QuantKernels kPlainQuantKernels = {RowPlain<4>, RowPlain<8>, 4};
constexpr QuantKernels kAvx2QuantKernels = {RowAvx2<4>, RowAvx2<8>, 4};
constexpr QuantKernels kAvx512QuantKernels = {RowAvx512<4>, RowAvx512<8>, 8};

}  // namespace

const QuantKernels& QuantKernelsFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return kAvx512QuantKernels;
    case SimdLevel::kAvx2:
      return kAvx2QuantKernels;
    case SimdLevel::kPlain:
      break;
  }
  return kPlainQuantKernels;
}

}  // namespace pagoda::worker
