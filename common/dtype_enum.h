#ifndef PAGODA_COMMON_DTYPE_ENUM_H_
#define PAGODA_COMMON_DTYPE_ENUM_H_

// The one element-type enum of the project, for common/, worker/ and
// kernels/. Dependency-free (no Abseil) so that the CUDA kernels and their
// tests include it on a machine with nothing but the CUDA toolkit; the
// parsing and conversion helpers are in common/dtype.h.

#include <cstddef>

namespace pagoda {

// Element types of weights, activations and KV caches.
enum class DType { kF32, kF16, kBF16 };

// Bytes per element.
inline constexpr size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

}  // namespace pagoda

#endif  // PAGODA_COMMON_DTYPE_ENUM_H_
