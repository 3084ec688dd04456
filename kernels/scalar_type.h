#ifndef PAGODA_KERNELS_SCALAR_TYPE_H_
#define PAGODA_KERNELS_SCALAR_TYPE_H_

#include <cstddef>

namespace pagoda::kernels {

// Element type of a tensor handed to a kernel. Mirrors pagoda::DType
// (common/dtype.h) one-to-one; it is repeated here so that the kernels and
// their tests build with nothing but the CUDA toolkit (the lent GPU machine
// has no Abseil). Convert with a switch at the call site.
enum class ScalarType { kF32, kF16, kBF16 };

inline constexpr size_t ScalarTypeSize(ScalarType type) { return type == ScalarType::kF32 ? 4 : 2; }

inline constexpr const char* ScalarTypeName(ScalarType type) {
  switch (type) {
    case ScalarType::kF32:
      return "f32";
    case ScalarType::kF16:
      return "f16";
    case ScalarType::kBF16:
      return "bf16";
  }
  return "?";
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_SCALAR_TYPE_H_
