#include "worker/cpu/w8a8_kernels.h"

#include <immintrin.h>

#include <array>

#include "common/fp8.h"
#include "worker/cpu/fp8_simd.h"

// The loops over token rows and unrolled chunks carry `#pragma GCC unroll`:
// at -O2 GCC keeps an array of accumulators indexed by a loop it does not
// unroll in memory, and each FMA then waits on a store and a load.
// As in simd.cc: GCC 12 warns inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::worker {
namespace {

// ---- plain: the reference the vector levels are tested against ----

void Int8DotPlain(const uint8_t* codes, const int8_t* x, size_t ld_x, int64_t n, int rows,
                  int32_t* dots) {
  for (int r = 0; r < rows; ++r) {
    int32_t sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<int32_t>(codes[i]) * x[r * ld_x + i];
    dots[r] = sum;
  }
}

const std::array<float, 256>& Fp8Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> values{};
    for (int c = 0; c < 256; ++c) values[c] = Fp8E4M3ToFloat(static_cast<uint8_t>(c));
    return values;
  }();
  return table;
}

void Fp8DotPlain(const uint8_t* codes, const float* x, size_t ld_x, int64_t n, int rows,
                 float* dots) {
  const std::array<float, 256>& table = Fp8Table();
  for (int r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += table[codes[i]] * x[r * ld_x + i];
    dots[r] = sum;
  }
}

// ---- AVX2 (+ F16C) ----

#define PAGODA_W8A8_AVX2 __attribute__((target("avx2,fma,f16c")))

PAGODA_W8A8_AVX2 inline int32_t SumInt32Avx2(__m256i v) {
  __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
  sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
  return _mm_cvtsi128_si32(sum);
}

PAGODA_W8A8_AVX2 inline float SumFloatAvx2(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_shuffle_ps(sum2, sum2, 1)));
}

// Codes widened to 16 bits (0..255) against int8 x widened with its sign:
// vpmaddwd's pairs (at most 2 * 255 * 128) cannot saturate, unlike
// vpmaddubsw's int16 sums.
template <int kRows>
PAGODA_W8A8_AVX2 void Int8DotAvx2Rows(const uint8_t* codes, const int8_t* x, size_t ld_x, int64_t n,
                                      int32_t* dots) {
  __m256i acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_si256();
  for (int64_t i = 0; i < n; i += 16) {
    const __m256i w =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256i xr =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + r * ld_x + i)));
      acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(w, xr));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) dots[r] = SumInt32Avx2(acc[r]);
}

// Two chunks a step into separate sums: one token row's FMAs would
// otherwise wait on each other's latency.
template <int kRows>
PAGODA_W8A8_AVX2 void Fp8DotAvx2Rows(const uint8_t* codes, const float* x, size_t ld_x, int64_t n,
                                     float* dots) {
  __m256 acc[2][kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
#pragma GCC unroll 4
    for (int u = 0; u < 2; ++u) {
      const __m256 w = fp8_simd::E4M3x8ToFloatTimes2m8(codes + i + 8 * u);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        acc[u][r] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + r * ld_x + i + 8 * u), acc[u][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    dots[r] = SumFloatAvx2(_mm256_add_ps(acc[0][r], acc[1][r])) * 256.0f;
  }
}

// ---- AVX-512 (F + BW, VNNI for int8 where present) ----

#define PAGODA_W8A8_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))
#define PAGODA_W8A8_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))

// vpdpbusd multiplies unsigned bytes (the codes) by signed ones (x) and adds
// each four products to an int32 lane: exactly the W8A8 dot.
template <int kRows>
PAGODA_W8A8_VNNI void Int8DotVnniRows(const uint8_t* codes, const int8_t* x, size_t ld_x, int64_t n,
                                      int32_t* dots) {
  __m512i acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 64) {
    const __m512i w = _mm512_loadu_si512(codes + i);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      acc[r] = _mm512_dpbusd_epi32(acc[r], w, _mm512_loadu_si512(x + r * ld_x + i));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) dots[r] = _mm512_reduce_add_epi32(acc[r]);
}

template <int kRows>
PAGODA_W8A8_AVX512 void Int8DotAvx512Rows(const uint8_t* codes, const int8_t* x, size_t ld_x,
                                          int64_t n, int32_t* dots) {
  __m512i acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 32) {
    const __m512i w =
        _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + i)));
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m512i xr = _mm512_cvtepi8_epi16(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + r * ld_x + i)));
      acc[r] = _mm512_add_epi32(acc[r], _mm512_madd_epi16(w, xr));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) dots[r] = _mm512_reduce_add_epi32(acc[r]);
}

// Four chunks a step into separate sums (one row's FMAs would otherwise
// wait on each other's latency): 16 accumulators at four rows.
template <int kRows>
PAGODA_W8A8_AVX512 void Fp8DotAvx512Rows(const uint8_t* codes, const float* x, size_t ld_x,
                                         int64_t n, float* dots) {
  __m512 acc[4][kRows];
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u) {
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) acc[u][r] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < n; i += 64) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      const __m512 w = fp8_simd::E4M3x16ToFloatTimes2m8(codes + i + 16 * u);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        acc[u][r] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + r * ld_x + i + 16 * u), acc[u][r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(acc[0][r], acc[1][r]), _mm512_add_ps(acc[2][r], acc[3][r]));
    dots[r] = _mm512_reduce_add_ps(sum) * 256.0f;
  }
}

// A row-count template dispatched at run time.
#define PAGODA_W8A8_BY_ROWS(name, kernel, T, Out)                                            \
  void name(const uint8_t* codes, const T* x, size_t ld_x, int64_t n, int rows, Out* dots) { \
    switch (rows) {                                                                          \
      case 1:                                                                                \
        return kernel<1>(codes, x, ld_x, n, dots);                                           \
      case 2:                                                                                \
        return kernel<2>(codes, x, ld_x, n, dots);                                           \
      case 3:                                                                                \
        return kernel<3>(codes, x, ld_x, n, dots);                                           \
      default:                                                                               \
        return kernel<4>(codes, x, ld_x, n, dots);                                           \
    }                                                                                        \
  }

PAGODA_W8A8_BY_ROWS(Int8DotAvx2, Int8DotAvx2Rows, int8_t, int32_t)
PAGODA_W8A8_BY_ROWS(Fp8DotAvx2, Fp8DotAvx2Rows, float, float)
PAGODA_W8A8_BY_ROWS(Int8DotVnni, Int8DotVnniRows, int8_t, int32_t)
PAGODA_W8A8_BY_ROWS(Int8DotAvx512, Int8DotAvx512Rows, int8_t, int32_t)
PAGODA_W8A8_BY_ROWS(Fp8DotAvx512, Fp8DotAvx512Rows, float, float)

bool CpuHasAvx512Bw() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

bool CpuHasAvx512Vnni() {
  __builtin_cpu_init();
  return CpuHasAvx512Bw() && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const W8A8Kernels& W8A8KernelsFor(SimdLevel level) {
  static const W8A8Kernels plain = {Int8DotPlain, Fp8DotPlain, "plain"};
  static const W8A8Kernels avx2 = {Int8DotAvx2, Fp8DotAvx2, "avx2 vpmaddwd"};
  // The AVX-512 level needs only avx512f; without BW the AVX2 loops serve.
  static const W8A8Kernels avx512 = [] {
    if (!CpuHasAvx512Bw()) return avx2;
    if (CpuHasAvx512Vnni()) {
      return W8A8Kernels{Int8DotVnni, Fp8DotAvx512, "avx512 vpdpbusd"};
    }
    return W8A8Kernels{Int8DotAvx512, Fp8DotAvx512, "avx512 vpmaddwd"};
  }();
  switch (level) {
    case SimdLevel::kPlain:
      return plain;
    case SimdLevel::kAvx2:
      return avx2;
    case SimdLevel::kAvx512:
      return avx512;
  }
  return plain;
}

}  // namespace pagoda::worker
