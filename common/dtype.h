#ifndef PAGODA_COMMON_DTYPE_H_
#define PAGODA_COMMON_DTYPE_H_

// The element types of weights, activations and the KV cache: their names as
// safetensors, --dtype and config.json spell them, and the f16/bf16 <-> f32
// bit conversions every backend and reader shares.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/dtype_enum.h"

namespace pagoda {

// "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2" (safetensors spelling, from
// kDTypeNames).
std::string_view DTypeName(DType dtype);
// Parses the safetensors spelling of a weight dtype; anything else, the
// KV-cache-only F8_E4M3 and F8_E5M2 included, is INVALID_ARGUMENT.
absl::StatusOr<DType> ParseSafetensorsDType(std::string_view name);
// The dtype a --dtype value or config.json torch_dtype names ("float32",
// "float", "float16", "half", "bfloat16"; case-sensitive); nullopt for
// anything else, "auto" and the KV-cache-only "fp8_e4m3" and "fp8_e5m2"
// included.
std::optional<DType> FindFlagDType(std::string_view name);
// "float32", "float16", "bfloat16": how --dtype and --kv-cache-dtype name
// `dtype`, for messages about those flags.
const char* DTypeFlagName(DType dtype);

// IEEE half and bfloat16 bit patterns to float and back (round to nearest even).
float HalfToFloat(uint16_t bits);
uint16_t FloatToHalf(float value);
inline float BFloat16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof(out));
  return out;
}
uint16_t FloatToBFloat16(float value);

// Converts `count` elements of `dtype` at `src` to float.
void ConvertToFloat(DType dtype, const void* src, size_t count, float* dst);
// Converts `count` floats to `dtype` (round to nearest even).
void ConvertFromFloat(DType dtype, const float* src, size_t count, void* dst);

// The weight-dtype flag (vLLM's --dtype): "auto" keeps each checkpoint's
// stored dtype (nullopt); "float32"/"float", "float16"/"half" and "bfloat16"
// force one. Anything else is INVALID_ARGUMENT naming the accepted values.
absl::StatusOr<std::optional<DType>> ParseDTypeFlag(std::string_view value);

// The KV-cache dtype flag (vLLM's --kv-cache-dtype): "auto" or "" (nullopt:
// the backend's default, f32 on CPU and the activation dtype on CUDA),
// "float32", "bfloat16", "float16", "fp8" / "fp8_e4m3" (kFp8E4M3) or
// "fp8_e5m2" (kFp8E5M2). Anything else is INVALID_ARGUMENT naming the
// accepted values.
absl::StatusOr<std::optional<DType>> ParseKvCacheDTypeFlag(std::string_view value);

}  // namespace pagoda

#endif  // PAGODA_COMMON_DTYPE_H_
