#include "common/fp8.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>


namespace pagoda {
namespace {

float DecodeE4M3(uint8_t code) {
  if (IsFp8E4M3Nan(code)) return std::numeric_limits<float>::quiet_NaN();
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  // Subnormals (exponent 0) are mantissa / 8 * 2^-6.
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (code & 0x80) != 0 ? -magnitude : magnitude;
}

const std::array<float, 256>& E4M3Values() {
  static const std::array<float, 256> values = [] {
    std::array<float, 256> table{};
    for (int c = 0; c < 256; ++c) table[c] = DecodeE4M3(static_cast<uint8_t>(c));
    return table;
  }();
  return values;
}

}  // namespace

float Fp8E4M3ToFloat(uint8_t code) { return E4M3Values()[code]; }

uint8_t FloatToFp8E4M3(float value) {
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::fmin(std::fabs(value), kFp8E4M3Max);
  if (magnitude < 0x1p-6f) {
    // Subnormals step by 2^-9: the count of steps is the code, and 8 steps
    // are code 0x08, the smallest normal. nearbyint rounds half to even.
    return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(magnitude * 512.0f)));
  }
  // Round the f32 mantissa to its top 3 bits, half to even, in the bits
  // (a carry moves into the exponent, as it should); then rebias 127 -> 7.
  uint32_t bits = std::bit_cast<uint32_t>(magnitude);
  bits += 0x7FFFF + ((bits >> 20) & 1);
  const int exponent = static_cast<int>(bits >> 23) - 127 + 7;
  const int mantissa = static_cast<int>((bits >> 20) & 0x7);
  return static_cast<uint8_t>(sign | (exponent << 3) | mantissa);
}

float Fp8E5M2ToFloat(uint8_t code) {
  const int exponent = (code >> 2) & 0x1F;
  const int mantissa = code & 0x3;
  float magnitude;
  if (exponent == 0x1F) {
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity()
                              : std::numeric_limits<float>::quiet_NaN();
  } else {
    // Subnormals (exponent 0) are mantissa / 4 * 2^-14.
    magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -16)
                              : std::ldexp(static_cast<float>(4 + mantissa), exponent - 17);
  }
  return (code & 0x80) != 0 ? -magnitude : magnitude;
}

uint8_t FloatToFp8E5M2(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  if (std::isnan(value)) return sign | 0x7E;
  const float magnitude = std::fmin(std::fabs(value), kFp8E5M2Max);
  if (magnitude < 0x1p-14f) {
    // Subnormals step by 2^-16; 4 steps are code 0x04, the smallest normal.
    return static_cast<uint8_t>(sign | static_cast<int>(std::nearbyint(magnitude * 65536.0f)));
  }
  // As E4M3: the f32 mantissa rounded to its top 2 bits, half to even, in
  // the bits; then rebias 127 -> 15.
  uint32_t bits = std::bit_cast<uint32_t>(magnitude);
  bits += 0xFFFFF + ((bits >> 21) & 1);
  const int exponent = static_cast<int>(bits >> 23) - 127 + 15;
  const int mantissa = static_cast<int>((bits >> 21) & 0x3);
  return static_cast<uint8_t>(sign | (exponent << 2) | mantissa);
}

}  // namespace pagoda
