#include "worker/quant/fp8.h"

#include <cmath>
#include <limits>

namespace pagoda::worker {

float Fp8E4M3ToFloat(uint8_t code) {
  if (IsFp8E4M3Nan(code)) return std::numeric_limits<float>::quiet_NaN();
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  // Subnormals (exponent 0) are mantissa / 8 * 2^-6.
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (code & 0x80) != 0 ? -magnitude : magnitude;
}

uint8_t FloatToFp8E4M3(float value) {
  if (std::isnan(value)) return 0x7F;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::min(std::fabs(value), kFp8E4M3Max);
  // The spacing of E4M3 values around `magnitude`: 2^(e-3) for a normal of
  // exponent e >= -6, 2^-9 below (the subnormals share the smallest normal
  // binade's spacing). Dividing by it is exact (a power of two), and
  // nearbyint rounds half to even in the default rounding mode.
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1).
  const int step_exponent = std::max(exponent - 1, -6) - 3;
  const float steps = std::nearbyint(std::ldexp(magnitude, -step_exponent));
  const float rounded = std::ldexp(steps, step_exponent);  // May carry into the next binade.
  if (rounded == 0.0f) return sign;
  int e = 0;
  std::frexp(rounded, &e);
  const int biased = std::max(e - 1 + 7, 0);
  const int mantissa = biased == 0 ? static_cast<int>(std::ldexp(rounded, 9))
                                   : static_cast<int>(std::ldexp(rounded, -(e - 1) + 3)) - 8;
  return static_cast<uint8_t>(sign | (biased << 3) | mantissa);
}

}  // namespace pagoda::worker
