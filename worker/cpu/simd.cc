// The CPU kernels' dispatch: which instruction-set levels this CPU runs and
// the kernel table of each (simd_levels.h; the kernels themselves are in
// simd_plain.cc, simd_avx2.cc and simd_avx512.cc).

#include "worker/cpu/simd.h"

#include <cpuid.h>

namespace pagoda::worker {

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
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c();
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
    case DType::kFp8E4M3:
      return dot_fp8e4m3;
    case DType::kFp8E5M2:
      return dot_fp8e5m2;
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
    case DType::kFp8E4M3:
      return score4_fp8e4m3;
    case DType::kFp8E5M2:
      return score4_fp8e5m2;
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
    case DType::kFp8E4M3:
      return tile4_fp8e4m3;
    case DType::kFp8E5M2:
      return tile4_fp8e5m2;
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
    case DType::kFp8E4M3:
      return widen_fp8e4m3;
    case DType::kFp8E5M2:
      return widen_fp8e5m2;
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
    case DType::kFp8E4M3:
      return narrow_fp8e4m3;
    case DType::kFp8E5M2:
      return narrow_fp8e5m2;
    case DType::kF32:
      break;
  }
  return narrow_f32;
}

SimdKernels::Attend16Fn SimdKernels::attend16(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return attend16_bf16;
    case DType::kF16:
      return attend16_f16;
    case DType::kFp8E4M3:
      return attend16_fp8e4m3;
    case DType::kFp8E5M2:
      return attend16_fp8e5m2;
    case DType::kF32:
      break;
  }
  return attend16_f32;
}

SimdKernels::Weigh4Fn SimdKernels::weigh4(DType dtype) const {
  switch (dtype) {
    case DType::kBF16:
      return weigh4_bf16;
    case DType::kF16:
      return weigh4_f16;
    case DType::kFp8E4M3:
      return weigh4_fp8e4m3;
    case DType::kFp8E5M2:
      return weigh4_fp8e5m2;
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
    case DType::kFp8E4M3:
      return pack16_fp8e4m3;
    case DType::kFp8E5M2:
      return pack16_fp8e5m2;
    case DType::kF32:
      break;
  }
  return pack16_f32;
}

const SimdKernels& SimdKernelsFor(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return simd_internal::Avx512Kernels();
    case SimdLevel::kAvx2:
      return simd_internal::Avx2Kernels();
    case SimdLevel::kPlain:
      break;
  }
  return simd_internal::PlainKernels();
}

const SimdKernels& BestSimdKernels() {
  static const SimdKernels& best = SimdKernelsFor(BestSimdLevel());
  return best;
}

}  // namespace pagoda::worker