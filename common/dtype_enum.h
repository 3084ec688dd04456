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
//
// kFp8E4M3 (FP8 E4M3, the "fn" variant: bias 7, no infinities, largest
// finite 448) and kFp8E5M2 (the top byte of an IEEE half) are storage types
// of the KV cache only (--kv-cache-dtype fp8, fp8_e4m3, fp8_e5m2):
// no arithmetic runs in it, the kernels widen its codes to f32. It is a
// DType rather than a type of its own because the KV cache's plumbing
// (KvCacheShape, Backend::Allocate, KvCacheLayer, swap and copy by bytes)
// carries a DType and needs nothing but its size; what must never see it is
// refused by name: --dtype, config.json's torch_dtype and safetensors
// headers skip the rows marked kv_cache_only below (FP8 weights are read as
// IntegerType::kF8E4M3 codes by the quantized readers, never as a DType).
enum class DType { kF32, kF16, kBF16, kFp8E4M3, kFp8E5M2 };

// Bytes per element.
inline constexpr size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return 1;
  }
  return 4;
}

// Every spelling of one dtype.
struct DTypeNames {
  DType dtype;
  // safetensors headers ("BF16"); also how errors name a tensor's dtype.
  const char* safetensors;
  // vLLM's --dtype and --kv-cache-dtype, and config.json's torch_dtype.
  const char* flag;
  // PyTorch's other name ("half"), which --dtype and torch_dtype also take
  // (--kv-cache-dtype does not, but for FP8, whose other name "fp8" is
  // --kv-cache-dtype's own); nullptr when there is none.
  const char* flag_alias;
  // Short form for kernel messages and test names ("bf16").
  const char* short_name;
  // A KV cache storage type only: never a weight, activation or checkpoint
  // tensor dtype (the name lookups for those skip it).
  bool kv_cache_only = false;
};

// In enum order, which is also the order error messages list them in.
inline constexpr DTypeNames kDTypeNames[] = {
    {DType::kF32, "F32", "float32", "float", "f32"},
    {DType::kF16, "F16", "float16", "half", "f16"},
    {DType::kBF16, "BF16", "bfloat16", nullptr, "bf16"},
    // vLLM's --kv-cache-dtype calls it fp8_e4m3, and fp8 for short.
    {DType::kFp8E4M3, "F8_E4M3", "fp8_e4m3", "fp8", "fp8e4m3", /*kv_cache_only=*/true},
    {DType::kFp8E5M2, "F8_E5M2", "fp8_e5m2", nullptr, "fp8e5m2", /*kv_cache_only=*/true},
};
static_assert(kDTypeNames[static_cast<int>(DType::kF32)].dtype == DType::kF32 &&
                  kDTypeNames[static_cast<int>(DType::kF16)].dtype == DType::kF16 &&
                  kDTypeNames[static_cast<int>(DType::kBF16)].dtype == DType::kBF16 &&
                  kDTypeNames[static_cast<int>(DType::kFp8E4M3)].dtype == DType::kFp8E4M3 &&
                  kDTypeNames[static_cast<int>(DType::kFp8E5M2)].dtype == DType::kFp8E5M2,
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
