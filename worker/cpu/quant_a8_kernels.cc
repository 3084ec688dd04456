#include "worker/cpu/quant_a8_kernels.h"

#include <immintrin.h>

#include <algorithm>

// The loops over token rows carry `#pragma GCC unroll`: at -O2 GCC keeps an
// array of accumulators indexed by a loop it does not unroll in memory.
// As in simd.cc: GCC 12 warns inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::worker {
namespace {

// ---- plain: the reference the vector levels are tested against ----

inline int A8Int4Code(const uint8_t* codes, int64_t i) {
  const uint8_t byte = codes[(i / kQuantChunk) * (kQuantChunk / 2) + (i % (kQuantChunk / 2))];
  return (i % kQuantChunk) < kQuantChunk / 2 ? (byte & 0xF) : (byte >> 4);
}

template <int kBits>
void RowA8Plain(const uint8_t* codes, const float* params, const QuantSegment* segments,
                int num_segments, const int8_t* x, size_t ld_x, const float* x_scale,
                const float* x_sum, size_t ld_s, int rows, float* y, size_t ld_y, bool accumulate) {
  for (int r = 0; r < rows; ++r) {
    const int8_t* xr = x + r * ld_x;
    float total = 0.0f;
    for (int s = 0; s < num_segments; ++s) {
      const QuantSegment& seg = segments[s];
      int32_t dot = 0;
      for (int64_t i = seg.start; i < seg.start + seg.length; ++i) {
        dot += (kBits == 4 ? A8Int4Code(codes, i) : codes[i]) * int32_t{xr[i]};
      }
      total += params[2 * seg.group] * x_scale[s * ld_s + r] * static_cast<float>(dot) +
               params[2 * seg.group + 1] * x_sum[s * ld_s + r];
    }
    y[r * ld_y] = (accumulate ? y[r * ld_y] : 0.0f) + total;
  }
}

// ---- AVX2 (no VNNI) ----

#define PAGODA_A8_AVX2 __attribute__((target("avx2,fma")))

PAGODA_A8_AVX2 inline float A8SumAvx2(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_shuffle_ps(sum2, sum2, 1)));
}

// The 32 codes of a 4-bit chunk as 32 bytes in input order: the 16 bytes in
// both halves, the upper half shifted down a nibble, then masked.
PAGODA_A8_AVX2 inline __m256i Int4ChunkA8Avx2(const uint8_t* codes, int64_t start) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + start / 2));
  const __m256i both = _mm256_broadcastsi128_si256(bytes);
  const __m256i shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

// One segment's int32 lane sums for kRows rows. 4-bit codes: vpmaddubsw
// (pairs of code * x, at most 2 * 15 * 128 = 3840 in magnitude, so eight
// chunks' int16 sums stay below 32768) then vpmaddwd by ones. 8-bit codes
// reach 2 * 255 * 128 a pair, which vpmaddubsw would saturate: both sides
// widened to 16 bits, vpmaddwd.
template <int kBits, int kRows>
PAGODA_A8_AVX2 void SegmentDotsAvx2(const uint8_t* codes, const int8_t* x, size_t ld_x,
                                    int64_t start, int64_t end, __m256i acc[kRows]) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kBits == 4) {
    for (int64_t i = start; i < end;) {
      __m256i pairs[kRows];
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) pairs[r] = _mm256_setzero_si256();
      const int64_t stop = std::min(end, i + 8 * kQuantChunk);
      for (; i < stop; i += kQuantChunk) {
        const __m256i w = Int4ChunkA8Avx2(codes, i);
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          const __m256i xr = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * ld_x + i));
          pairs[r] = _mm256_add_epi16(pairs[r], _mm256_maddubs_epi16(w, xr));
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r)
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(pairs[r], ones));
    }
  } else {
    for (int64_t i = start; i < end; i += 16) {
      const __m256i w =
          _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        const __m256i xr = _mm256_cvtepi8_epi16(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + r * ld_x + i)));
        acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(w, xr));
      }
    }
  }
}

// Each segment's scales and offsets for all rows at once, as the VNNI
// kernel's (below).
template <int kBits, int kRows>
PAGODA_A8_AVX2 void RowsA8Avx2(const uint8_t* codes, const float* params,
                               const QuantSegment* segments, int num_segments, const int8_t* x,
                               size_t ld_x, const float* x_scale, const float* x_sum, size_t ld_s,
                               float* y, size_t ld_y, bool accumulate) {
  const __m128i row_lanes =
      _mm_setr_epi32(-1, kRows > 1 ? -1 : 0, kRows > 2 ? -1 : 0, kRows > 3 ? -1 : 0);
  __m256 total[kRows];
  __m128 offsets = _mm_setzero_ps();
  alignas(16) float scales[4];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) total[r] = _mm256_setzero_ps();
  for (int s = 0; s < num_segments; ++s) {
    const QuantSegment& seg = segments[s];
    __m256i acc[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_si256();
    SegmentDotsAvx2<kBits, kRows>(codes, x, ld_x, seg.start, seg.start + seg.length, acc);
    _mm_store_ps(scales, _mm_mul_ps(_mm_set1_ps(params[2 * seg.group]),
                                    _mm_maskload_ps(x_scale + s * ld_s, row_lanes)));
    offsets = _mm_fmadd_ps(_mm_set1_ps(params[2 * seg.group + 1]),
                           _mm_maskload_ps(x_sum + s * ld_s, row_lanes), offsets);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      total[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r]), _mm256_set1_ps(scales[r]), total[r]);
    }
  }
  alignas(16) float offset[4];
  _mm_store_ps(offset, offsets);
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    y[r * ld_y] = (accumulate ? y[r * ld_y] : 0.0f) + A8SumAvx2(total[r]) + offset[r];
  }
}

// ---- AVX-512 VNNI ----

#define PAGODA_A8_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

// Two 4-bit chunks (64 codes) as 64 bytes in input order: 128-bit lanes
// [chunk 0, chunk 0, chunk 1, chunk 1], the odd lanes shifted down a nibble.
PAGODA_A8_VNNI inline __m512i Int4PairVnni(const uint8_t* codes, int64_t start) {
  const __m512i bytes = _mm512_castsi256_si512(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + start / 2)));
  const __m512i lanes = _mm512_shuffle_i64x2(bytes, bytes, _MM_SHUFFLE(1, 1, 0, 0));
  const __m512i shifted = _mm512_srlv_epi64(lanes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

// One 4-bit chunk in the low 32 bytes (the high ones meet zero inputs).
PAGODA_A8_VNNI inline __m512i Int4ChunkVnni(const uint8_t* codes, int64_t start) {
  const __m512i lanes =
      _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + start / 2)));
  const __m512i shifted = _mm512_srlv_epi64(lanes, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F));
}

// vpdpbusd multiplies unsigned bytes (the codes) by signed ones (x) and adds
// each four products to an int32 lane, exactly; 64 codes a step, a last
// lone chunk of 32 against inputs loaded under a mask (zero above). Each
// segment's scales and zero-point offsets are taken for all rows at once
// (one lane a row): a group of 128 codes is only two vpdpbusd a row, so a
// scalar epilogue per row would cost as much as the products.
template <int kBits, int kRows>
PAGODA_A8_VNNI void RowsA8Vnni(const uint8_t* codes, const float* params,
                               const QuantSegment* segments, int num_segments, const int8_t* x,
                               size_t ld_x, const float* x_scale, const float* x_sum, size_t ld_s,
                               float* y, size_t ld_y, bool accumulate) {
  constexpr __mmask64 kLow32 = 0xFFFFFFFFull;
  constexpr __mmask8 kRowLanes = static_cast<__mmask8>((1u << kRows) - 1);
  __m512 total[kRows];
  __m256 offsets = _mm256_setzero_ps();
  alignas(32) float scales[8];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) total[r] = _mm512_setzero_ps();
  for (int s = 0; s < num_segments; ++s) {
    const QuantSegment& seg = segments[s];
    const int64_t end = seg.start + seg.length;
    __m512i acc[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_si512();
    int64_t i = seg.start;
    for (; i + 2 * kQuantChunk <= end; i += 2 * kQuantChunk) {
      const __m512i w = kBits == 4 ? Int4PairVnni(codes, i) : _mm512_loadu_si512(codes + i);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        acc[r] = _mm512_dpbusd_epi32(acc[r], w, _mm512_loadu_si512(x + r * ld_x + i));
      }
    }
    if (i < end) {
      const __m512i w =
          kBits == 4 ? Int4ChunkVnni(codes, i) : _mm512_maskz_loadu_epi8(kLow32, codes + i);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        acc[r] = _mm512_dpbusd_epi32(acc[r], w, _mm512_maskz_loadu_epi8(kLow32, x + r * ld_x + i));
      }
    }
    _mm256_store_ps(scales, _mm256_mul_ps(_mm256_set1_ps(params[2 * seg.group]),
                                          _mm256_maskz_loadu_ps(kRowLanes, x_scale + s * ld_s)));
    offsets = _mm256_fmadd_ps(_mm256_set1_ps(params[2 * seg.group + 1]),
                              _mm256_maskz_loadu_ps(kRowLanes, x_sum + s * ld_s), offsets);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), _mm512_set1_ps(scales[r]), total[r]);
    }
  }
  alignas(32) float offset[8];
  _mm256_store_ps(offset, offsets);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    y[r * ld_y] = (accumulate ? y[r * ld_y] : 0.0f) + _mm512_reduce_add_ps(total[r]) + offset[r];
  }
}

// A row-count template dispatched at run time (rows in 1..kMax).
#define PAGODA_A8_CASE(kernel, n)                                                                 \
  case n:                                                                                         \
    return kernel<kBits, n>(codes, params, segments, num_segments, x, ld_x, x_scale, x_sum, ld_s, \
                            y, ld_y, accumulate);

template <int kBits>
void RowA8Avx2(const uint8_t* codes, const float* params, const QuantSegment* segments,
               int num_segments, const int8_t* x, size_t ld_x, const float* x_scale,
               const float* x_sum, size_t ld_s, int rows, float* y, size_t ld_y, bool accumulate) {
  switch (rows) {
    PAGODA_A8_CASE(RowsA8Avx2, 1)
    PAGODA_A8_CASE(RowsA8Avx2, 2)
    PAGODA_A8_CASE(RowsA8Avx2, 3)
    default:
      PAGODA_A8_CASE(RowsA8Avx2, 4)
  }
}

template <int kBits>
void RowA8Vnni(const uint8_t* codes, const float* params, const QuantSegment* segments,
               int num_segments, const int8_t* x, size_t ld_x, const float* x_scale,
               const float* x_sum, size_t ld_s, int rows, float* y, size_t ld_y, bool accumulate) {
  switch (rows) {
    PAGODA_A8_CASE(RowsA8Vnni, 1)
    PAGODA_A8_CASE(RowsA8Vnni, 2)
    PAGODA_A8_CASE(RowsA8Vnni, 3)
    PAGODA_A8_CASE(RowsA8Vnni, 4)
    PAGODA_A8_CASE(RowsA8Vnni, 5)
    PAGODA_A8_CASE(RowsA8Vnni, 6)
    PAGODA_A8_CASE(RowsA8Vnni, 7)
    default:
      PAGODA_A8_CASE(RowsA8Vnni, 8)
  }
}
#undef PAGODA_A8_CASE

bool CpuHasA8Vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const QuantA8Kernels& QuantA8KernelsFor(SimdLevel level) {
  static const QuantA8Kernels plain = {RowA8Plain<4>, RowA8Plain<8>, 4, "plain int32"};
  static const QuantA8Kernels avx2 = {RowA8Avx2<4>, RowA8Avx2<8>, 4,
                                      "avx2 vpmaddubsw (int4) / vpmaddwd (int8)"};
  static const QuantA8Kernels avx512 =
      CpuHasA8Vnni() ? QuantA8Kernels{RowA8Vnni<4>, RowA8Vnni<8>, 8, "avx512 vpdpbusd"} : avx2;
  switch (level) {
    case SimdLevel::kAvx512:
      return avx512;
    case SimdLevel::kAvx2:
      return avx2;
    case SimdLevel::kPlain:
      break;
  }
  return plain;
}

}  // namespace pagoda::worker
