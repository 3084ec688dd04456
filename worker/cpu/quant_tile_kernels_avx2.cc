// The AVX2 kernels over quant_tile_kernels.h's tiles of 16 output rows: each
// 64-byte step of codes taken as two 32-byte halves (tile rows 0-7 and
// 8-15), each half one 256-bit operand holding 4 inputs (8-bit) or 8 (4-bit,
// two nibbles) of 8 rows. The same layout as the AVX-512 kernels, so the
// Linears pack, address and split tiles alike at both levels. The multiply
// is AVX-VNNI's 256-bit vpdpbusd where the CPU has it, else vpmaddubsw +
// vpmaddwd; the sums are exact either way and the epilogue is the plain
// loop's, so every variant gives the plain loop's bits.

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "worker/cpu/quant_tile_kernels.h"

namespace pagoda::worker {
namespace {

// Every function carries avxvnni so that they inline into each other; the
// instantiations without kVnni use no VNNI instruction (GCC does not turn
// vpmaddubsw + vpmaddwd into vpdpbusd; objdump of this object checks it).
#define PAGODA_TILE_AVX2 __attribute__((target("avx2,fma,avxvnni")))

// Inputs of a token row taken per pass (8 sums of 8 lanes: two halves a
// row) and per block of the segment (the block's codes, 4 KB at most, stay
// in L1 between the passes of rows 0-3 and 4-7 of a call).
constexpr int kAvx2TileRowsPerPass = 4;
constexpr int64_t kAvx2TileBlockInputs = 256;

// Four int8 inputs broadcast to the 8 lanes.
PAGODA_TILE_AVX2 inline __m256i Avx2TileBroadcast(const int8_t* x) {
  int32_t four;
  std::memcpy(&four, x, sizeof(four));
  return _mm256_set1_epi32(four);
}

// One half (h) of one 8-input step at p: a and b multiply inputs p..p+3
// and p+4..p+7. 8-bit codes without VNNI are split into nibbles (a, b the
// low ones, c, d the high ones): a vpmaddubsw pair of 255 * -128 would
// saturate int16; one of 15 * -128 cannot.
struct Avx2TileOperands {
  __m256i a, b, c, d;
};

template <int kBits, bool kVnni>
PAGODA_TILE_AVX2 inline Avx2TileOperands Avx2TileStep(const uint8_t* codes, int64_t p, int h) {
  const __m256i low_nibbles = _mm256_set1_epi8(0x0F);
  Avx2TileOperands op;
  if constexpr (kBits == 4) {
    const __m256i bytes =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + p * 8 + 32 * h));
    op.a = _mm256_and_si256(bytes, low_nibbles);
    op.b = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_nibbles);
  } else {
    const auto* step = codes + p * 16 + 32 * h;
    op.a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step));
    op.b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 64));
    if constexpr (!kVnni) {
      op.c = _mm256_and_si256(_mm256_srli_epi16(op.a, 4), low_nibbles);
      op.d = _mm256_and_si256(_mm256_srli_epi16(op.b, 4), low_nibbles);
      op.a = _mm256_and_si256(op.a, low_nibbles);
      op.b = _mm256_and_si256(op.b, low_nibbles);
    }
  }
  return op;
}

// sums + the step's products with the 8 inputs at x. Without VNNI the two
// vpmaddubsw results are added in int16 first: 4 products of at most
// 15 * 128 each, 7680 < 32767.
template <int kBits, bool kVnni>
PAGODA_TILE_AVX2 inline __m256i Avx2TileAccumulate(__m256i sums, const Avx2TileOperands& op,
                                                   const int8_t* x) {
  const __m256i first = Avx2TileBroadcast(x);
  const __m256i second = Avx2TileBroadcast(x + 4);
  if constexpr (kVnni) {
    sums = _mm256_dpbusd_avx_epi32(sums, op.a, first);
    return _mm256_dpbusd_avx_epi32(sums, op.b, second);
  } else {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i low =
        _mm256_add_epi16(_mm256_maddubs_epi16(op.a, first), _mm256_maddubs_epi16(op.b, second));
    sums = _mm256_add_epi32(sums, _mm256_madd_epi16(low, ones));
    if constexpr (kBits == 8) {
      const __m256i high =
          _mm256_add_epi16(_mm256_maddubs_epi16(op.c, first), _mm256_maddubs_epi16(op.d, second));
      sums = _mm256_add_epi32(sums, _mm256_madd_epi16(high, _mm256_set1_epi16(16)));
    }
    return sums;
  }
}

// sums[r][h] += the dots of token rows r < kRows over inputs [0, length)
// of codes (a multiple of 8). With kPrefetch, `next` (as many bytes) is
// pulled into L2 at the pace the codes are read.
template <int kBits, bool kVnni, int kRows, bool kPrefetch>
PAGODA_TILE_AVX2 void Avx2TilePass(const uint8_t* codes, const int8_t* x, size_t ld_x,
                                   int64_t length, __m256i (*sums)[2], const uint8_t* next) {
  __m256i acc[kRows][2];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r][0] = sums[r][0], acc[r][1] = sums[r][1];
  for (int64_t p = 0; p < length; p += 8) {
    if constexpr (kPrefetch) {
      for (int offset = 0; offset < 16 * kBits; offset += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + p * 2 * kBits + offset), _MM_HINT_T1);
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const Avx2TileOperands op = Avx2TileStep<kBits, kVnni>(codes, p, h);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        acc[r][h] = Avx2TileAccumulate<kBits, kVnni>(acc[r][h], op, x + r * ld_x + p);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) sums[r][0] = acc[r][0], sums[r][1] = acc[r][1];
}

// The dots of token rows r < kRows (1..8) over one segment: blocks of
// inputs, each taken by rows 0-3 and then 4-7 while its codes are in L1.
template <int kBits, bool kVnni, int kRows>
PAGODA_TILE_AVX2 void Avx2TileDots(const uint8_t* codes, const int8_t* x, size_t ld_x,
                                   int64_t length, __m256i (*sums)[2], const uint8_t* next) {
  constexpr int kFirst = std::min(kRows, kAvx2TileRowsPerPass);
  for (int r = 0; r < kRows; ++r) sums[r][0] = sums[r][1] = _mm256_setzero_si256();
  for (int64_t begin = 0; begin < length; begin += kAvx2TileBlockInputs) {
    const int64_t n = std::min(kAvx2TileBlockInputs, length - begin);
    const uint8_t* block = codes + begin * 2 * kBits;
    if (next != nullptr) {
      Avx2TilePass<kBits, kVnni, kFirst, true>(block, x + begin, ld_x, n, sums,
                                               next + begin * 2 * kBits);
    } else {
      Avx2TilePass<kBits, kVnni, kFirst, false>(block, x + begin, ld_x, n, sums, nullptr);
    }
    if constexpr (kRows > kFirst) {
      Avx2TilePass<kBits, kVnni, kRows - kFirst, false>(block, x + kFirst * ld_x + begin, ld_x, n,
                                                        sums + kFirst, nullptr);
    }
  }
}

// Stores lanes [0, n) of v (n in 0..8).
PAGODA_TILE_AVX2 inline void Avx2TileStore(float* y, __m256 v, int n) {
  if (n >= 8) return _mm256_storeu_ps(y, v);
  if (n <= 0) return;
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes), v);
}

// The weight-only tile (QuantTileFn) for token rows kRows: TilePlain's f32
// steps (the scale product rounded, then two fused multiply-adds).
template <int kBits, bool kVnni, int kRows>
PAGODA_TILE_AVX2 void Avx2TileRows(const uint8_t* tile, const float* params,
                                   const QuantSegment* segments, int num_segments, const int8_t* x,
                                   size_t ld_x, const float* x_scale, const float* x_sum,
                                   size_t ld_s, float* y, size_t ld_y, int cols,
                                   const uint8_t* next) {
  __m256 total[kRows][2];
  for (int r = 0; r < kRows; ++r) total[r][0] = total[r][1] = _mm256_setzero_ps();
  for (int s = 0; s < num_segments; ++s) {
    const QuantSegment& seg = segments[s];
    const size_t offset = static_cast<size_t>(seg.start) * 2 * kBits;
    __m256i dots[kRows][2];
    Avx2TileDots<kBits, kVnni, kRows>(tile + offset, x + seg.start, ld_x, seg.length, dots,
                                      next != nullptr ? next + offset : nullptr);
    const float* group = params + seg.group * 2 * kQuantTileRows;
    for (int h = 0; h < 2; ++h) {
      const __m256 scales = _mm256_loadu_ps(group + 8 * h);
      const __m256 offsets = _mm256_loadu_ps(group + kQuantTileRows + 8 * h);
      for (int r = 0; r < kRows; ++r) {
        const __m256 scale = _mm256_mul_ps(scales, _mm256_set1_ps(x_scale[s * ld_s + r]));
        total[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[r][h]), scale, total[r][h]);
        total[r][h] = _mm256_fmadd_ps(offsets, _mm256_set1_ps(x_sum[s * ld_s + r]), total[r][h]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    Avx2TileStore(y + r * ld_y, total[r][0], cols);
    Avx2TileStore(y + r * ld_y + 8, total[r][1], cols - 8);
  }
}

#define PAGODA_AVX2_TILE_CASE(n)                                                                 \
  case n:                                                                                        \
    return Avx2TileRows<kBits, kVnni, n>(tile, params, segments, num_segments, x, ld_x, x_scale, \
                                         x_sum, ld_s, y, ld_y, cols, next);

template <int kBits, bool kVnni>
void Avx2Tile(const uint8_t* tile, const float* params, const QuantSegment* segments,
              int num_segments, const int8_t* x, size_t ld_x, const float* x_scale,
              const float* x_sum, size_t ld_s, int rows, float* y, size_t ld_y, int cols,
              const uint8_t* next) {
  switch (rows) {
    PAGODA_AVX2_TILE_CASE(1)
    PAGODA_AVX2_TILE_CASE(2)
    PAGODA_AVX2_TILE_CASE(3)
    PAGODA_AVX2_TILE_CASE(4)
    PAGODA_AVX2_TILE_CASE(5)
    PAGODA_AVX2_TILE_CASE(6)
    PAGODA_AVX2_TILE_CASE(7)
    default:
      PAGODA_AVX2_TILE_CASE(8)
  }
}
#undef PAGODA_AVX2_TILE_CASE

// W8A8's tile (W8A8TileFn): W8A8TilePlain's steps, each f32 operation
// rounded on its own. The empty asm keeps GCC from fusing the multiply and
// the bias add into one FMA (its _mm256_* are plain vector operators).
template <bool kVnni, int kRows>
PAGODA_TILE_AVX2 void Avx2W8A8TileRows(const uint8_t* tile, int64_t padded_in, const int8_t* x,
                                       size_t ld_x, const float* x_scale, const int32_t* x_sum,
                                       const float* w_scale, const float* bias, float* y,
                                       size_t ld_y, int cols, const uint8_t* next) {
  __m256i dots[kRows][2];
  Avx2TileDots<8, kVnni, kRows>(tile, x, ld_x, padded_in, dots, next);
  for (int r = 0; r < kRows; ++r) {
    const auto offset = static_cast<int32_t>(128u * static_cast<uint32_t>(x_sum[r]));
    for (int h = 0; h < 2; ++h) {
      const __m256i corrected = _mm256_sub_epi32(dots[r][h], _mm256_set1_epi32(offset));
      const __m256 scale =
          _mm256_mul_ps(_mm256_set1_ps(x_scale[r]), _mm256_loadu_ps(w_scale + 8 * h));
      __m256 value = _mm256_mul_ps(_mm256_cvtepi32_ps(corrected), scale);
      if (bias != nullptr) {
        asm("" : "+x"(value));
        value = _mm256_add_ps(value, _mm256_loadu_ps(bias + 8 * h));
      }
      Avx2TileStore(y + r * ld_y + 8 * h, value, cols - 8 * h);
    }
  }
}

#define PAGODA_AVX2_W8A8_CASE(n)                                                                  \
  case n:                                                                                         \
    return Avx2W8A8TileRows<kVnni, n>(tile, padded_in, x, ld_x, x_scale, x_sum, w_scale, bias, y, \
                                      ld_y, cols, next);

template <bool kVnni>
void Avx2W8A8Tile(const uint8_t* tile, int64_t padded_in, const int8_t* x, size_t ld_x,
                  const float* x_scale, const int32_t* x_sum, const float* w_scale,
                  const float* bias, int rows, float* y, size_t ld_y, int cols,
                  const uint8_t* next) {
  switch (rows) {
    PAGODA_AVX2_W8A8_CASE(1)
    PAGODA_AVX2_W8A8_CASE(2)
    PAGODA_AVX2_W8A8_CASE(3)
    PAGODA_AVX2_W8A8_CASE(4)
    PAGODA_AVX2_W8A8_CASE(5)
    PAGODA_AVX2_W8A8_CASE(6)
    PAGODA_AVX2_W8A8_CASE(7)
    default:
      PAGODA_AVX2_W8A8_CASE(8)
  }
}
#undef PAGODA_AVX2_W8A8_CASE

// ---- the input quantization, 8 lanes at a time ----

// max|x| over x[0, n) and whether every x is finite (x - x is 0 for finite
// x, NaN for NaN and infinities); the last n % 8 inputs one at a time.
PAGODA_TILE_AVX2 float Avx2AbsMax(const float* x, int64_t n, bool* finite) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  __m256 all_finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
    all_finite = _mm256_and_ps(all_finite,
                               _mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_EQ_OQ));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float result = 0.0f;
  for (float lane : lanes) result = std::max(result, lane);
  *finite = _mm256_movemask_ps(all_finite) == 0xFF;
  for (; i < n; ++i) {
    result = std::max(result, std::fabs(x[i]));
    *finite &= std::isfinite(x[i]);
  }
  return result;
}

// q = clamp(round_half_even(x / s), -128, 127) over x[0, n), returns
// sum(q): the plain loop's division and rounding (vroundps to nearest
// even, nearbyint in the default mode), so the same bits.
PAGODA_TILE_AVX2 int32_t Avx2QuantizeInputs(const float* x, int64_t n, float s, int8_t* q) {
  const __m256 divisor = _mm256_set1_ps(s);
  __m256i sum = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), divisor),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
    const __m256i integers = _mm256_cvtps_epi32(v);
    sum = _mm256_add_epi32(sum, integers);
    // In range already, so the saturating packs are exact.
    const __m128i words =
        _mm_packs_epi32(_mm256_castsi256_si128(integers), _mm256_extracti128_si256(integers, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(words, words));
  }
  alignas(32) int32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
  int32_t total = 0;
  for (int32_t lane : lanes) total += lane;
  for (; i < n; ++i) {
    const float v = std::clamp(std::nearbyint(x[i] / s), -128.0f, 127.0f);
    q[i] = static_cast<int8_t>(v);
    total += static_cast<int32_t>(v);
  }
  return total;
}

// QuantizeGroupFn: quant_tile_kernels.cc's QuantizeGroupPlain's steps.
PAGODA_TILE_AVX2 void Avx2QuantizeGroup(const float* x, int64_t n, int8_t* q, float* scale,
                                        float* qsum) {
  *scale = *qsum = 0.0f;
  if (n <= 0) return;
  bool finite = true;
  const float s = Avx2AbsMax(x, n, &finite) / 127.0f;
  if (!finite || !std::isfinite(s) || s == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(n));
    if (!finite || !std::isfinite(s)) *scale = *qsum = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const int32_t sum = Avx2QuantizeInputs(x, n, s, q);
  *scale = s;
  *qsum = s * static_cast<float>(sum);
}

// QuantizeTokenFn: quant_tile_kernels.cc's QuantizeTokenPlain's steps.
PAGODA_TILE_AVX2 void Avx2QuantizeToken(const float* x, int64_t n, int8_t* q, float* scale,
                                        int32_t* sum) {
  *scale = 0.0f;
  *sum = 0;
  if (n <= 0) return;
  bool finite = true;
  const float s = Avx2AbsMax(x, n, &finite) / 127.0f;
  if (!finite || !std::isfinite(s) || s == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(n));
    if (!finite || !std::isfinite(s)) *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  *sum = Avx2QuantizeInputs(x, n, s, q);
  *scale = s;
}
#undef PAGODA_TILE_AVX2

bool CpuHasAvx2Tiles() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

// AVX-VNNI: CPUID leaf 7, subleaf 1, EAX bit 4 (GCC 12's
// __builtin_cpu_supports("avxvnni") does not read that subleaf).
bool CpuHasAvxVnni() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return CpuHasAvx2Tiles() && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 &&
         (eax & (1u << 4)) != 0;
}

}  // namespace

const QuantTileKernels* Avx2QuantTileKernels(bool vnni) {
  static const QuantTileKernels with_vnni = {Avx2Tile<4, true>, Avx2Tile<8, true>,
                                             Avx2QuantizeGroup};
  static const QuantTileKernels without_vnni = {Avx2Tile<4, false>, Avx2Tile<8, false>,
                                                Avx2QuantizeGroup};
  static const bool has_avx2 = CpuHasAvx2Tiles();
  static const bool has_vnni = CpuHasAvxVnni();
  if (vnni) return has_vnni ? &with_vnni : nullptr;
  return has_avx2 ? &without_vnni : nullptr;
}

const W8A8TileKernels* Avx2W8A8TileKernels(bool vnni) {
  static const W8A8TileKernels with_vnni = {Avx2W8A8Tile<true>, Avx2QuantizeToken};
  static const W8A8TileKernels without_vnni = {Avx2W8A8Tile<false>, Avx2QuantizeToken};
  static const bool has_avx2 = CpuHasAvx2Tiles();
  static const bool has_vnni = CpuHasAvxVnni();
  if (vnni) return has_vnni ? &with_vnni : nullptr;
  return has_avx2 ? &without_vnni : nullptr;
}

}  // namespace pagoda::worker
