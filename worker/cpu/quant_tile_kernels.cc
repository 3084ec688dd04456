#include "worker/cpu/quant_tile_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

// As in simd.cc: GCC 12 warns inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::worker {
namespace {

#define PAGODA_TILE_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

// ---- plain: the reference the VNNI kernels are tested against ----

// The same f32 steps as the VNNI kernel (a fused multiply-add each), so the
// two agree bit for bit.
template <int kBits>
void TilePlain(const uint8_t* tile, const float* params, const QuantSegment* segments,
               int num_segments, const int8_t* x, size_t ld_x, const float* x_scale,
               const float* x_sum, size_t ld_s, int rows, float* y, size_t ld_y, int cols,
               const uint8_t* /*next*/) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) {
      float total = 0.0f;
      for (int s = 0; s < num_segments; ++s) {
        const QuantSegment& seg = segments[s];
        int32_t dot = 0;
        for (int64_t p = seg.start; p < seg.start + seg.length; ++p) {
          dot += QuantTileCode(tile, kBits, j, p) * int32_t{x[r * ld_x + p]};
        }
        const float* group = params + seg.group * 2 * kQuantTileRows;
        total = std::fma(static_cast<float>(dot), group[j] * x_scale[s * ld_s + r], total);
        total = std::fma(group[kQuantTileRows + j], x_sum[s * ld_s + r], total);
      }
      y[r * ld_y + j] = total;
    }
  }
}

// W8A8's tile, one token row and tile row at a time. The sum is taken in
// uint32 so that it wraps past 2^31 as vpdpbusd's int32 lanes do.
void W8A8TilePlain(const uint8_t* tile, int64_t padded_in, const int8_t* x, size_t ld_x,
                   const float* x_scale, const int32_t* x_sum, const float* w_scale,
                   const float* bias, int rows, float* y, size_t ld_y, int cols,
                   const uint8_t* /*next*/) {
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < cols; ++j) {
      uint32_t dot = 0;
      for (int64_t p = 0; p < padded_in; ++p) {
        dot += static_cast<uint32_t>(QuantTileCode(tile, 8, j, p) * int32_t{x[r * ld_x + p]});
      }
      const auto corrected = static_cast<int32_t>(dot - 128u * static_cast<uint32_t>(x_sum[r]));
      float value = static_cast<float>(corrected) * (x_scale[r] * w_scale[j]);
      if (bias != nullptr) value += bias[j];
      y[r * ld_y + j] = value;
    }
  }
}

void QuantizeTokenPlain(const float* x, int64_t n, int8_t* q, float* scale, int32_t* sum) {
  *scale = 0.0f;
  *sum = 0;
  if (n <= 0) return;
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    amax = std::max(amax, std::fabs(x[i]));
    finite &= std::isfinite(x[i]);
  }
  const float s = amax / 127.0f;
  std::memset(q, 0, static_cast<size_t>(n));
  if (!finite || !std::isfinite(s)) {
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (s == 0.0f) return;
  int32_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    // nearbyint rounds half to even (the default mode), as torch.round.
    const float v = std::clamp(std::nearbyint(x[i] / s), -128.0f, 127.0f);
    q[i] = static_cast<int8_t>(v);
    total += static_cast<int32_t>(v);
  }
  *scale = s;
  *sum = total;
}

// A group's input quantization is a token's rule over the group, with the
// sum carried as s * sum(q) (NaN with the scale).
void QuantizeGroupPlain(const float* x, int64_t n, int8_t* q, float* scale, float* qsum) {
  int32_t sum = 0;
  QuantizeTokenPlain(x, n, q, scale, &sum);
  *qsum = *scale * static_cast<float>(sum);
}

// ---- AVX-512 VNNI ----

// sums + codes · (four int8 inputs at x, broadcast to every lane): one
// vpdpbusd with a {1to16} memory operand. Written in assembly because GCC
// loads the broadcast into a register and copies the sums around the
// intrinsic (11 copies and 16 broadcasts beside 16 vpdpbusd in the 8-token
// loop).
PAGODA_TILE_VNNI inline __m512i DotBroadcast(__m512i sums, __m512i codes, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(sums)
      : "v"(codes), "m"(*reinterpret_cast<const int8_t(*)[4]>(x)));
  return sums;
}

// The two vpdpbusd operands of 64 bytes of codes: the bytes as they are
// (8-bit: inputs p..p+3), or the low nibbles (inputs p..p+3) and the high
// ones (p+4..p+7) of one 64-byte step (4-bit); codes advances to the next.
template <int kBits>
PAGODA_TILE_VNNI inline void TileOperands(const uint8_t* codes, int64_t p, __m512i& first,
                                          __m512i& second) {
  if constexpr (kBits == 4) {
    const __m512i low_nibbles = _mm512_set1_epi8(0x0F);
    const __m512i bytes = _mm512_loadu_si512(codes + p * 8);
    first = _mm512_and_si512(bytes, low_nibbles);
    second = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), low_nibbles);
  } else {
    first = _mm512_loadu_si512(codes + p * 16);
    second = _mm512_loadu_si512(codes + p * 16 + 64);
  }
}

// Every token row keeps two sums (the two operands'), so no chain waits on
// vpdpbusd's latency: 16 sums and two operands at 8 rows, 18 of the 32
// registers (19 with the nibble mask). With one chain a row past 4 rows, 8
// token rows of 8-bit codes ran at 350-480 GOP/s a thread with the codes
// in L2 and with two at 550-600 (about 90 % of this CPU's vpdpbusd rate,
// 4.5-5 G a second); 4-bit codes (bench_quant_kernels, 8 tokens) went from
// 14.0-14.1 to 15.2-15.6 GB/s. The integer sums are exact, so the split
// changes no result. Separate arrays, not one indexed by a chain, so that
// GCC keeps each sum in its register without copies. With kPrefetch, `next`
// (the codes of the next tile, as many bytes) is pulled into L2 at the pace
// this tile's codes are read.
template <int kBits, int kRows, bool kPrefetch = false>
PAGODA_TILE_VNNI void SegmentDotsTile(const uint8_t* codes, const int8_t* x, size_t ld_x,
                                      int64_t length, __m512i dots[kRows],
                                      const uint8_t* next = nullptr) {
  __m512i first_sums[kRows];
  __m512i second_sums[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) first_sums[r] = second_sums[r] = _mm512_setzero_si512();
  for (int64_t p = 0; p < length; p += 8) {
    __m512i first, second;
    TileOperands<kBits>(codes, p, first, second);
    if constexpr (kPrefetch) {
      // A step's 16 * kBits bytes: one or two cache lines.
      for (int offset = 0; offset < 16 * kBits; offset += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + p * 2 * kBits + offset), _MM_HINT_T1);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      first_sums[r] = DotBroadcast(first_sums[r], first, x + r * ld_x + p);
      second_sums[r] = DotBroadcast(second_sums[r], second, x + r * ld_x + p + 4);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    dots[r] = _mm512_add_epi32(first_sums[r], second_sums[r]);
  }
}

template <int kBits, int kRows>
PAGODA_TILE_VNNI void TileRowsVnni(const uint8_t* tile, const float* params,
                                   const QuantSegment* segments, int num_segments, const int8_t* x,
                                   size_t ld_x, const float* x_scale, const float* x_sum,
                                   size_t ld_s, float* y, size_t ld_y, int cols,
                                   const uint8_t* next) {
  __m512 total[kRows];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) total[r] = _mm512_setzero_ps();
  for (int s = 0; s < num_segments; ++s) {
    const QuantSegment& seg = segments[s];
    __m512i dots[kRows];
    const size_t offset = static_cast<size_t>(seg.start) * 2 * kBits;
    if (next != nullptr) {
      SegmentDotsTile<kBits, kRows, true>(tile + offset, x + seg.start, ld_x, seg.length, dots,
                                          next + offset);
    } else {
      SegmentDotsTile<kBits, kRows>(tile + offset, x + seg.start, ld_x, seg.length, dots);
    }
    const float* group = params + seg.group * 2 * kQuantTileRows;
    const __m512 scales = _mm512_loadu_ps(group);
    const __m512 offsets = _mm512_loadu_ps(group + kQuantTileRows);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512 scale = _mm512_mul_ps(scales, _mm512_set1_ps(x_scale[s * ld_s + r]));
      total[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[r]), scale, total[r]);
      total[r] = _mm512_fmadd_ps(offsets, _mm512_set1_ps(x_sum[s * ld_s + r]), total[r]);
    }
  }
  const __mmask16 lanes = static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) _mm512_mask_storeu_ps(y + r * ld_y, lanes, total[r]);
}

#define PAGODA_TILE_CASE(n)                                                                      \
  case n:                                                                                        \
    return TileRowsVnni<kBits, n>(tile, params, segments, num_segments, x, ld_x, x_scale, x_sum, \
                                  ld_s, y, ld_y, cols, next);

template <int kBits>
void TileVnni(const uint8_t* tile, const float* params, const QuantSegment* segments,
              int num_segments, const int8_t* x, size_t ld_x, const float* x_scale,
              const float* x_sum, size_t ld_s, int rows, float* y, size_t ld_y, int cols,
              const uint8_t* next) {
  switch (rows) {
    PAGODA_TILE_CASE(1)
    PAGODA_TILE_CASE(2)
    PAGODA_TILE_CASE(3)
    PAGODA_TILE_CASE(4)
    PAGODA_TILE_CASE(5)
    PAGODA_TILE_CASE(6)
    PAGODA_TILE_CASE(7)
    default:
      PAGODA_TILE_CASE(8)
  }
}
#undef PAGODA_TILE_CASE

// ---- W8A8 at AVX-512 VNNI ----

// Lanes [0, remaining) of 16.
inline __mmask16 TokenTailMask(int64_t remaining) {
  return remaining >= 16 ? __mmask16{0xFFFF} : static_cast<__mmask16>((1u << remaining) - 1);
}

// QuantizeTokenPlain 16 lanes at a time, the tail under a mask (its lanes
// read as 0: finite, below any |x|, and quantized to 0). A lane is finite
// where x - x is 0 (NaN for NaN and infinities).
PAGODA_TILE_VNNI void QuantizeTokenVnni(const float* x, int64_t n, int8_t* q, float* scale,
                                        int32_t* sum) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 finite = 0xFFFF;
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(TokenTailMask(n - i), x + i);
    amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
    finite &= _mm512_cmp_ps_mask(_mm512_sub_ps(v, v), _mm512_setzero_ps(), _CMP_EQ_OQ);
  }
  const float s = _mm512_reduce_max_ps(amax) / 127.0f;
  *scale = 0.0f;
  *sum = 0;
  if (finite != 0xFFFF || !std::isfinite(s)) {
    std::memset(q, 0, static_cast<size_t>(n));
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (s == 0.0f) {
    std::memset(q, 0, static_cast<size_t>(n));
    return;
  }
  const __m512 divisor = _mm512_set1_ps(s);
  __m512i total = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = TokenTailMask(n - i);
    __m512 v = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(lanes, x + i), divisor),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-128.0f)), _mm512_set1_ps(127.0f));
    const __m512i integers = _mm512_cvtps_epi32(v);
    total = _mm512_add_epi32(total, integers);
    _mm512_mask_cvtepi32_storeu_epi8(q + i, lanes, integers);
  }
  *scale = s;
  *sum = _mm512_reduce_add_epi32(total);
}

// QuantizeGroupPlain's rule at AVX-512: the token quantizer over the group
// (the same division and vrndscaleps rounding to nearest even, so the same
// bits), with the sum carried as s * sum(q).
PAGODA_TILE_VNNI void QuantizeGroupVnni(const float* x, int64_t n, int8_t* q, float* scale,
                                        float* qsum) {
  int32_t sum = 0;
  QuantizeTokenVnni(x, n, q, scale, &sum);
  *qsum = *scale * static_cast<float>(sum);
}

// The W8A8 epilogue on 16 lanes. The _round_ forms with the current mode
// are the plain multiply and add, but GCC cannot fuse them into an FMA
// (which would round once and part from the row path's bits).
template <int kRows>
PAGODA_TILE_VNNI void W8A8TileRowsVnni(const uint8_t* tile, int64_t padded_in, const int8_t* x,
                                       size_t ld_x, const float* x_scale, const int32_t* x_sum,
                                       const float* w_scale, const float* bias, float* y,
                                       size_t ld_y, int cols, const uint8_t* next) {
  __m512i dots[kRows];
  if (next != nullptr) {
    SegmentDotsTile<8, kRows, true>(tile, x, ld_x, padded_in, dots, next);
  } else {
    SegmentDotsTile<8, kRows>(tile, x, ld_x, padded_in, dots);
  }
  const __m512 scales = _mm512_loadu_ps(w_scale);
  const __mmask16 lanes = static_cast<__mmask16>((1u << cols) - 1);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    const auto offset = static_cast<int32_t>(128u * static_cast<uint32_t>(x_sum[r]));
    const __m512i corrected = _mm512_sub_epi32(dots[r], _mm512_set1_epi32(offset));
    const __m512 scale =
        _mm512_mul_round_ps(_mm512_set1_ps(x_scale[r]), scales, _MM_FROUND_CUR_DIRECTION);
    __m512 value =
        _mm512_mul_round_ps(_mm512_cvtepi32_ps(corrected), scale, _MM_FROUND_CUR_DIRECTION);
    if (bias != nullptr) {
      value = _mm512_add_round_ps(value, _mm512_loadu_ps(bias), _MM_FROUND_CUR_DIRECTION);
    }
    _mm512_mask_storeu_ps(y + r * ld_y, lanes, value);
  }
}

#define PAGODA_W8A8_TILE_CASE(n)                                                                 \
  case n:                                                                                        \
    return W8A8TileRowsVnni<n>(tile, padded_in, x, ld_x, x_scale, x_sum, w_scale, bias, y, ld_y, \
                               cols, next);

void W8A8TileVnni(const uint8_t* tile, int64_t padded_in, const int8_t* x, size_t ld_x,
                  const float* x_scale, const int32_t* x_sum, const float* w_scale,
                  const float* bias, int rows, float* y, size_t ld_y, int cols,
                  const uint8_t* next) {
  switch (rows) {
    PAGODA_W8A8_TILE_CASE(1)
    PAGODA_W8A8_TILE_CASE(2)
    PAGODA_W8A8_TILE_CASE(3)
    PAGODA_W8A8_TILE_CASE(4)
    PAGODA_W8A8_TILE_CASE(5)
    PAGODA_W8A8_TILE_CASE(6)
    PAGODA_W8A8_TILE_CASE(7)
    default:
      PAGODA_W8A8_TILE_CASE(8)
  }
}
#undef PAGODA_W8A8_TILE_CASE

bool CpuHasTileVnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const QuantTileKernels& PlainQuantTileKernels() {
  static const QuantTileKernels plain = {TilePlain<4>, TilePlain<8>, QuantizeGroupPlain};
  return plain;
}

const QuantTileKernels* VnniQuantTileKernels() {
  static const QuantTileKernels vnni = {TileVnni<4>, TileVnni<8>, QuantizeGroupVnni};
  static const bool supported = CpuHasTileVnni();
  return supported ? &vnni : nullptr;
}

const W8A8TileKernels& PlainW8A8TileKernels() {
  static const W8A8TileKernels plain = {W8A8TilePlain, QuantizeTokenPlain};
  return plain;
}

const W8A8TileKernels* VnniW8A8TileKernels() {
  static const W8A8TileKernels vnni = {W8A8TileVnni, QuantizeTokenVnni};
  static const bool supported = CpuHasTileVnni();
  return supported ? &vnni : nullptr;
}

namespace {

// The tile table of `layout` at `level` among the AVX-512 VNNI and the two
// AVX2 tables (first non-null of the preference order), or nullptr.
template <typename Table>
const Table* ChooseTiles(SimdLevel level, Int8Layout layout, const Table* avx512_vnni,
                         const Table* avx_vnni, const Table* avx2) {
  if (level == SimdLevel::kPlain || layout == Int8Layout::kRows) return nullptr;
  if (layout == Int8Layout::kTilesNoVnni) return avx2;
  if (level == SimdLevel::kAvx512 && avx512_vnni != nullptr) return avx512_vnni;
  return avx_vnni != nullptr ? avx_vnni : avx2;
}

}  // namespace

const QuantTileKernels* ChooseQuantTileKernels(SimdLevel level, Int8Layout layout) {
  return ChooseTiles(level, layout, VnniQuantTileKernels(), Avx2QuantTileKernels(true),
                     Avx2QuantTileKernels(false));
}

const W8A8TileKernels* ChooseW8A8TileKernels(SimdLevel level, Int8Layout layout) {
  return ChooseTiles(level, layout, VnniW8A8TileKernels(), Avx2W8A8TileKernels(true),
                     Avx2W8A8TileKernels(false));
}

std::string_view Int8KernelsName(SimdLevel level) {
  const QuantTileKernels* tiles = ChooseQuantTileKernels(level, Int8Layout::kBest);
  if (tiles == nullptr) return "rows";
  if (tiles == VnniQuantTileKernels()) return "avx512 vnni";
  return tiles == Avx2QuantTileKernels(true) ? "avx-vnni" : "avx2 vpmaddubsw";
}

}  // namespace pagoda::worker
