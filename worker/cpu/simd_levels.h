#ifndef PAGODA_WORKER_CPU_SIMD_LEVELS_H_
#define PAGODA_WORKER_CPU_SIMD_LEVELS_H_

// Inside the CPU kernels (simd.h): the kernel table of each instruction-set
// level, each defined in its own file (simd_plain.cc, simd_avx2.cc,
// simd_avx512.cc), and the plain loops, which are both the reference every
// other level is tested against and the vector levels' tails. Only those
// files include it (simd.h declares their tables).

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/fp8.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker::simd_internal {

// ---- plain x86-64: the reference every other level is tested against ----

template <DType kType>
inline float Load(const void* p, size_t i) {
  const auto* bits = static_cast<const uint16_t*>(p);
  if constexpr (kType == DType::kF32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (kType == DType::kBF16) {
    return BFloat16ToFloat(bits[i]);
  } else if constexpr (kType == DType::kF16) {
    return HalfToFloat(bits[i]);
  } else if constexpr (kType == DType::kFp8E4M3) {
    return Fp8E4M3ToFloat(static_cast<const uint8_t*>(p)[i]);  // A table of 256.
  } else {
    static_assert(kType == DType::kFp8E5M2);
    return Fp8E5M2ToFloat(static_cast<const uint8_t*>(p)[i]);
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
  } else if constexpr (kType == DType::kFp8E4M3) {
    auto* codes = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < n; ++i) codes[i] = FloatToFp8E4M3(a[i]);
  } else if constexpr (kType == DType::kFp8E5M2) {
    auto* codes = static_cast<uint8_t*>(out);
    for (size_t i = 0; i < n; ++i) codes[i] = FloatToFp8E5M2(a[i]);
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

float ExpSumPlain(const float* in, float shift, float* out, size_t n);
void SiluMulPlain(const float* gate, const float* up, float* out, size_t n);
// simd_exp_f64.cc: SimdKernels::exp_sum_f64 at each level.
double ExpSumF64Plain(const float* in, float shift, size_t n);
double ExpSumF64Avx2(const float* in, float shift, size_t n);
double ExpSumF64Avx512(const float* in, float shift, size_t n);
// simd_argmax.cc: SimdKernels::argmax at each level.
size_t ArgMaxPlain(const float* in, size_t n, float* max_value);
size_t ArgMaxAvx2(const float* in, size_t n, float* max_value);
size_t ArgMaxAvx512(const float* in, size_t n, float* max_value);
// simd_gumbel.cc: SimdKernels::gumbel_candidates at each level.
size_t GumbelCandidatesPlain(const float* logits, size_t n, uint64_t first, const GumbelScan& scan,
                             uint32_t* ids);
size_t GumbelCandidatesAvx2(const float* logits, size_t n, uint64_t first, const GumbelScan& scan,
                            uint32_t* ids);
size_t GumbelCandidatesAvx512(const float* logits, size_t n, uint64_t first,
                              const GumbelScan& scan, uint32_t* ids);

}  // namespace pagoda::worker::simd_internal

#endif  // PAGODA_WORKER_CPU_SIMD_LEVELS_H_
