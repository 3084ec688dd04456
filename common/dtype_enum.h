#ifndef PAGODA_COMMON_DTYPE_ENUM_H_
#define PAGODA_COMMON_DTYPE_ENUM_H_

// The one element-type enum of the project, for common/, worker/ and
// kernels/, and the one table of its names. Dependency-free (no Abseil) so
// that the CUDA kernels and their tests include it on a machine with nothing
// but the CUDA toolkit; the parsing and conversion helpers are in
// common/dtype.h.

#include <cstddef>
#include <string_view>

namespace pagoda {

// Element types of weights, activations and KV caches.
enum class DType { kF32, kF16, kBF16 };

// Bytes per element.
inline constexpr size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

// Every spelling of one dtype.
struct DTypeNames {
  DType dtype;
  // safetensors headers ("BF16"); also how errors name a tensor's dtype.
  const char* safetensors;
  // vLLM's --dtype and --kv-cache-dtype, and config.json's torch_dtype.
  const char* flag;
  // PyTorch's other name ("half"), which --dtype and torch_dtype also take
  // (--kv-cache-dtype does not); nullptr when there is none.
  const char* flag_alias;
  // Short form for kernel messages and test names ("bf16").
  const char* short_name;
};

// In enum order, which is also the order error messages list them in.
inline constexpr DTypeNames kDTypeNames[] = {
    {DType::kF32, "F32", "float32", "float", "f32"},
    {DType::kF16, "F16", "float16", "half", "f16"},
    {DType::kBF16, "BF16", "bfloat16", nullptr, "bf16"},
};
static_assert(kDTypeNames[static_cast<int>(DType::kF32)].dtype == DType::kF32 &&
                  kDTypeNames[static_cast<int>(DType::kF16)].dtype == DType::kF16 &&
                  kDTypeNames[static_cast<int>(DType::kBF16)].dtype == DType::kBF16,
              "kDTypeNames must list the dtypes in enum order");

// The names of `dtype`; nullptr for a value outside the enum.
inline constexpr const DTypeNames* FindDTypeNames(DType dtype) {
  for (const DTypeNames& names : kDTypeNames) {
    if (names.dtype == dtype) return &names;
  }
  return nullptr;
}

// The dtype spelled `name` in the column `column` of kDTypeNames; nullptr
// when no row has it.
inline constexpr const DTypeNames* FindDTypeNamed(std::string_view name,
                                                  const char* DTypeNames::*column) {
  for (const DTypeNames& names : kDTypeNames) {
    if (names.*column != nullptr && name == names.*column) return &names;
  }
  return nullptr;
}

}  // namespace pagoda

#endif  // PAGODA_COMMON_DTYPE_ENUM_H_
