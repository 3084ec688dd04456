#ifndef PAGODA_KERNELS_SCALAR_TYPE_H_
#define PAGODA_KERNELS_SCALAR_TYPE_H_

// The element type as the CUDA kernels name it: the project's one DType
// (common/dtype_enum.h) under the kernels' ScalarType spelling, with nothing
// but the CUDA toolkit needed to include it.

#include <cstddef>

#include "common/dtype_enum.h"

namespace pagoda::kernels {

// Element type of a tensor handed to a kernel: the project's one DType
// (common/dtype_enum.h, dependency-free so the kernels still build with
// nothing but the CUDA toolkit), under the kernels' historical name.
using ScalarType = ::pagoda::DType;

inline constexpr size_t ScalarTypeSize(ScalarType type) { return ::pagoda::DTypeSize(type); }

// "f32", "f16", "bf16": the short names of the one table (kDTypeNames).
inline constexpr const char* ScalarTypeName(ScalarType type) {
  const DTypeNames* names = FindDTypeNames(type);
  return names == nullptr ? "?" : names->short_name;
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_SCALAR_TYPE_H_
