#include "common/dtype.h"

#include <bit>
#include <cmath>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/fp8.h"

namespace pagoda {

namespace {

// "<first>, <second>, ..." over `column` of kDTypeNames, each alias after
// its dtype when `with_aliases`: what an error lists as accepted. In table
// order without the KV-cache-only types, or in `order` when given.
std::string JoinDTypeNames(const char* DTypeNames::*column, bool with_aliases,
                           std::span<const DType> order = {}) {
  std::string joined;
  auto append = [&](const DTypeNames& names) {
    if (order.empty() && names.kv_cache_only) return;
    absl::StrAppend(&joined, joined.empty() ? "" : ", ", names.*column);
    if (with_aliases && names.flag_alias != nullptr) {
      absl::StrAppend(&joined, ", ", names.flag_alias);
    }
  };
  if (order.empty()) {
    for (const DTypeNames& names : kDTypeNames) append(names);
  } else {
    for (DType dtype : order) append(*FindDTypeNames(dtype));
  }
  return joined;
}

}  // namespace

std::string_view DTypeName(DType dtype) {
  const DTypeNames* names = FindDTypeNames(dtype);
  return names == nullptr ? "UNKNOWN" : names->safetensors;
}

absl::StatusOr<DType> ParseSafetensorsDType(std::string_view name) {
  const DTypeNames* names = FindDTypeNamed(name, &DTypeNames::safetensors);
  if (names != nullptr && !names->kv_cache_only) return names->dtype;
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported dtype \"", std::string(name),
      "\" (supported: ", JoinDTypeNames(&DTypeNames::safetensors, /*with_aliases=*/false), ")"));
}

const char* DTypeFlagName(DType dtype) {
  const DTypeNames* names = FindDTypeNames(dtype);
  return names == nullptr ? "?" : names->flag;
}

std::optional<DType> FindFlagDType(std::string_view name) {
  const DTypeNames* names = FindDTypeNamed(name, &DTypeNames::flag);
  if (names == nullptr) names = FindDTypeNamed(name, &DTypeNames::flag_alias);
  // A KV-cache-only type is no weight or activation dtype.
  if (names == nullptr || names->kv_cache_only) return std::nullopt;
  return names->dtype;
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t out;
  if (exponent == 0x1f) {
    // Inf keeps a zero mantissa; NaN keeps its payload (and stays NaN).
    out = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    out = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    out = sign;
  } else {
    // Subnormal half: normalize it, since every half subnormal is a normal float.
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    const uint32_t float_exponent = static_cast<uint32_t>(127 - 15 + 1 - shift);
    out = sign | (float_exponent << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(out);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits >= 0x7f800000u) {
    if (abs_bits == 0x7f800000u) return sign | 0x7c00u;
    // NaN: keep the top payload bits and force a quiet bit so it stays NaN.
    return sign | 0x7e00u | static_cast<uint16_t>((abs_bits >> 13) & 0x3ffu);
  }
  // 65520 and above round to infinity (65504 is the largest half).
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;
  const int exponent = static_cast<int>(abs_bits >> 23) - 127;
  if (exponent >= -14) {
    // Normal half. Rounding may carry into the exponent, which is still correct.
    const uint32_t mantissa = abs_bits & 0x7fffffu;
    uint32_t half = (static_cast<uint32_t>(exponent + 15) << 10) | (mantissa >> 13);
    const uint32_t remainder = mantissa & 0x1fffu;
    if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  if (exponent < -25) return sign;  // Below half the smallest subnormal: zero.
  // Subnormal half: value = m * 2^-24 with the implicit bit made explicit.
  const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  const int shift = -exponent - 14 + 13;  // Between 14 and 24.
  uint32_t half = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncating could clear every payload bit left, so force a quiet bit.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

void ConvertToFloat(DType dtype, const void* src, size_t count, float* dst) {
  if (count == 0) return;  // Empty tensors may come with null pointers.
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16: {
      const auto* bytes = static_cast<const unsigned char*>(src);
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);  // Source may be unaligned.
        dst[i] = HalfToFloat(bits);
      }
      return;
    }
    case DType::kBF16: {
      const auto* bytes = static_cast<const unsigned char*>(src);
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        dst[i] = BFloat16ToFloat(bits);
      }
      return;
    }
    case DType::kFp8E4M3: {
      const auto* codes = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = Fp8E4M3ToFloat(codes[i]);
      return;
    }
    case DType::kFp8E5M2: {
      const auto* codes = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) dst[i] = Fp8E5M2ToFloat(codes[i]);
      return;
    }
  }
}

void ConvertFromFloat(DType dtype, const float* src, size_t count, void* dst) {
  if (count == 0) return;
  auto* bits = static_cast<uint16_t*>(dst);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) bits[i] = FloatToHalf(src[i]);
      return;
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) bits[i] = FloatToBFloat16(src[i]);
      return;
    case DType::kFp8E4M3: {
      auto* codes = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < count; ++i) codes[i] = FloatToFp8E4M3(src[i]);
      return;
    }
    case DType::kFp8E5M2: {
      auto* codes = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < count; ++i) codes[i] = FloatToFp8E5M2(src[i]);
      return;
    }
  }
}

absl::StatusOr<std::optional<DType>> ParseDTypeFlag(std::string_view value) {
  if (value == "auto" || value.empty()) return std::optional<DType>();
  if (std::optional<DType> dtype = FindFlagDType(value)) return dtype;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", std::string(value), "\" (accepted: auto, ",
                   JoinDTypeNames(&DTypeNames::flag, /*with_aliases=*/true), ")"));
}

absl::StatusOr<std::optional<DType>> ParseKvCacheDTypeFlag(std::string_view value) {
  if (value == "auto" || value.empty()) return std::optional<DType>();
  const DTypeNames* names = FindDTypeNamed(value, &DTypeNames::flag);
  // "fp8" is the one alias --kv-cache-dtype takes ("half" and "float" are
  // --dtype's only, as in vLLM).
  if (names == nullptr && value == "fp8") names = FindDTypeNames(DType::kFp8E4M3);
  if (names != nullptr) return std::optional<DType>(names->dtype);
  // vLLM's --kv-cache-dtype help lists bfloat16 before float16 and fp8
  // after them; so does ours.
  constexpr DType kVllmOrder[] = {DType::kF32, DType::kBF16, DType::kF16};
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kv cache dtype \"", std::string(value), "\" (accepted: auto, ",
                   JoinDTypeNames(&DTypeNames::flag, /*with_aliases=*/false, kVllmOrder),
                   ", fp8, fp8_e4m3, fp8_e5m2)"));
}

}  // namespace pagoda
