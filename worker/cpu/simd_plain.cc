// The plain x86-64 level of the CPU kernels: the reference every other level
// is tested against, and the level of CPUs without AVX2.

#include <cmath>
#include <cstddef>

#include "worker/cpu/simd_levels.h"

namespace pagoda::worker::simd_internal {

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

namespace {

constexpr SimdKernels kPlainKernels = {DotPlain<DType::kF32>,
                                       DotPlain<DType::kBF16>,
                                       DotPlain<DType::kF16>,
                                       DotPlain<DType::kFp8E4M3>,
                                       DotPlain<DType::kFp8E5M2>,
                                       Score4Plain<DType::kF32>,
                                       Score4Plain<DType::kBF16>,
                                       Score4Plain<DType::kF16>,
                                       Score4Plain<DType::kFp8E4M3>,
                                       Score4Plain<DType::kFp8E5M2>,
                                       Tile4Plain<DType::kF32>,
                                       Tile4Plain<DType::kBF16>,
                                       Tile4Plain<DType::kF16>,
                                       Tile4Plain<DType::kFp8E4M3>,
                                       Tile4Plain<DType::kFp8E5M2>,
                                       WidenPlain<DType::kF32>,
                                       WidenPlain<DType::kBF16>,
                                       WidenPlain<DType::kF16>,
                                       WidenPlain<DType::kFp8E4M3>,
                                       WidenPlain<DType::kFp8E5M2>,
                                       NarrowPlain<DType::kF32>,
                                       NarrowPlain<DType::kBF16>,
                                       NarrowPlain<DType::kF16>,
                                       NarrowPlain<DType::kFp8E4M3>,
                                       NarrowPlain<DType::kFp8E5M2>,
                                       Weigh4Plain<DType::kF32>,
                                       Weigh4Plain<DType::kBF16>,
                                       Weigh4Plain<DType::kF16>,
                                       Weigh4Plain<DType::kFp8E4M3>,
                                       Weigh4Plain<DType::kFp8E5M2>,
                                       nullptr,
                                       nullptr,
                                       nullptr,
                                       nullptr,
                                       nullptr,
                                       nullptr,
                                       ExpSumPlain,
                                       SiluMulPlain,
                                       ExpSumF64Plain,
                                       ArgMaxPlain,
                                       GumbelCandidatesPlain};

}  // namespace

const SimdKernels& PlainKernels() { return kPlainKernels; }

}  // namespace pagoda::worker::simd_internal
