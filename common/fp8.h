#ifndef PAGODA_COMMON_FP8_H_
#define PAGODA_COMMON_FP8_H_

// FP8 E4M3 (the "fn" variant of torch.float8_e4m3fn and safetensors'
// F8_E4M3: bias 7, no infinities, 0x7F/0xFF NaN, largest finite 448) to and
// from f32: shared by the FP8 weight readers and kernels (worker/quant,
// worker/cpu/w8a8_*) and the FP8 KV cache (DType::kFp8E4M3).

#include <cstdint>

namespace pagoda {

inline constexpr float kFp8E4M3Max = 448.0f;

// The exact value of an E4M3 code (NaN for 0x7F and 0xFF).
float Fp8E4M3ToFloat(uint8_t code);
// `value` rounded to the nearest E4M3 value, ties to even, saturated to
// +-448 as vLLM's conversions clamp before they cast (NaN stays NaN).
uint8_t FloatToFp8E4M3(float value);
// Whether the code is one of the two NaNs.
inline bool IsFp8E4M3Nan(uint8_t code) { return (code & 0x7F) == 0x7F; }

// FP8 E5M2 (torch.float8_e5m2: bias 15, infinities and NaNs as IEEE, largest
// finite 57344) is the top byte of an IEEE half: the KV cache's
// --kv-cache-dtype fp8_e5m2.
inline constexpr float kFp8E5M2Max = 57344.0f;
// The exact value of an E5M2 code (that of the half `code << 8`).
float Fp8E5M2ToFloat(uint8_t code);
// `value` rounded to the nearest E5M2 value, ties to even (directly, not
// through a half: no double rounding), saturated to +-57344 as vLLM's
// saturating conversion (infinities too); NaN stays NaN (0x7E, signed).
uint8_t FloatToFp8E5M2(float value);

}  // namespace pagoda

#endif  // PAGODA_COMMON_FP8_H_
