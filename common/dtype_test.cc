#include "common/dtype.h"

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fp8.h"
#include "gtest/gtest.h"

namespace pagoda {
namespace {

TEST(DTypeTest, SizesNamesAndParsing) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto parsed = ParseSafetensorsDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, dtype);
  }
  auto bad = ParseSafetensorsDType("I64");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("I64"), std::string_view::npos);
}

TEST(DTypeTest, HalfToFloatKnownValues) {
  EXPECT_EQ(HalfToFloat(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));     // Smallest normal.
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));     // Smallest subnormal.
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));  // Largest subnormal.
  EXPECT_EQ(HalfToFloat(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(HalfToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));  // Signalling NaN stays NaN.
}

TEST(DTypeTest, FloatToHalfKnownValuesAndRounding) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  // Half ulp at 1.0 is 2^-11: ties go to even.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // Overflow: 65519 rounds down to 65504, 65520 (the tie) up to infinity.
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  // Subnormals and underflow.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // Tie to even (zero).
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie to even 2.
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(FloatToHalf(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Largest subnormal plus a bit rounds up into the smallest normal.
  EXPECT_EQ(FloatToHalf(std::ldexp(1023.75f, -24)), 0x0400);
  uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A NaN whose payload sits only in the low bits must not become infinity.
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::bit_cast<float>(0x7f800001u)))));
}

TEST(DTypeTest, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    const float value = HalfToFloat(half);
    const bool is_nan = (half & 0x7c00) == 0x7c00 && (half & 0x03ff) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(value)) << bits;
      ASSERT_TRUE(std::isnan(HalfToFloat(FloatToHalf(value)))) << bits;
    } else {
      ASSERT_EQ(FloatToHalf(value), half) << bits;
    }
  }
}

// Independent check of rounding: the half nearest a float, found by search
// over all finite halves, must equal FloatToHalf (ties to even mantissa).
TEST(DTypeTest, FloatToHalfMatchesNearestHalfSearch) {
  std::vector<std::pair<double, uint16_t>> halves;
  for (uint32_t bits = 0; bits < 0x7c00; ++bits) {
    halves.push_back({static_cast<double>(HalfToFloat(static_cast<uint16_t>(bits))),
                      static_cast<uint16_t>(bits)});
  }
  uint32_t state = 12345;
  for (int trial = 0; trial < 20000; ++trial) {
    state = state * 1664525u + 1013904223u;
    // Random magnitudes across the half range, including subnormals.
    const float value = std::ldexp(static_cast<float>(state >> 8) / (1 << 24), (trial % 42) - 26);
    auto upper = std::lower_bound(halves.begin(), halves.end(), std::make_pair(double{value}, 0),
                                  [](const auto& a, const auto& b) { return a.first < b.first; });
    uint16_t expected;
    if (upper == halves.end()) {
      expected = 0x7c00;  // Beyond 65504: covered by the known-value test.
      if (value < 65520.0f) expected = 0x7bff;
    } else if (upper == halves.begin() || upper->first == value) {
      expected = upper->second;
    } else {
      auto lower = upper - 1;
      const double down = value - lower->first;
      const double up = upper->first - value;
      if (down < up) {
        expected = lower->second;
      } else if (up < down) {
        expected = upper->second;
      } else {
        expected = (lower->second & 1) == 0 ? lower->second : upper->second;
      }
    }
    ASSERT_EQ(FloatToHalf(value), expected) << value;
    ASSERT_EQ(FloatToHalf(-value), expected | 0x8000) << value;
  }
}

TEST(DTypeTest, BFloat16KnownValuesAndRounding) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000);
  EXPECT_EQ(BFloat16ToFloat(0x4049), 3.140625f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: tie to even (1.0).
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBFloat16(std::numeric_limits<float>::max()), 0x7f80);  // Rounds to inf.
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::bit_cast<float>(0x7f800001u)))));
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float value = BFloat16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(FloatToBFloat16(value), bits) << bits;
  }
}

TEST(DTypeTest, ConvertToFloatHandlesEachDTypeAndUnalignedInput) {
  const std::vector<float> values = {1.0f, -0.5f, 3.25f, 0.0f};
  std::vector<float> out(values.size());
  ConvertToFloat(DType::kF32, values.data(), values.size(), out.data());
  EXPECT_EQ(out, values);

  // Unaligned start: one leading pad byte.
  std::vector<unsigned char> buffer(1 + 2 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits = FloatToHalf(values[i]);
    std::memcpy(&buffer[1 + 2 * i], &bits, 2);
  }
  ConvertToFloat(DType::kF16, buffer.data() + 1, values.size(), out.data());
  EXPECT_EQ(out, values);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits = FloatToBFloat16(values[i]);
    std::memcpy(&buffer[1 + 2 * i], &bits, 2);
  }
  ConvertToFloat(DType::kBF16, buffer.data() + 1, values.size(), out.data());
  EXPECT_EQ(out, values);
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

TEST(DTypeFlagTest, ParsesVllmSpellings) {
  EXPECT_EQ(*ParseDTypeFlag("auto"), std::nullopt);
  EXPECT_EQ(*ParseDTypeFlag("float32"), DType::kF32);
  EXPECT_EQ(*ParseDTypeFlag("float"), DType::kF32);
  EXPECT_EQ(*ParseDTypeFlag("float16"), DType::kF16);
  EXPECT_EQ(*ParseDTypeFlag("half"), DType::kF16);
  EXPECT_EQ(*ParseDTypeFlag("bfloat16"), DType::kBF16);
  // FP8 is a KV cache type only: --dtype, torch_dtype and safetensors
  // headers refuse it, and --dtype's error does not offer it.
  for (const char* fp8 : {"fp8", "fp8_e4m3", "fp8_e5m2"}) {
    const auto bad = ParseDTypeFlag(fp8);
    ASSERT_FALSE(bad.ok()) << fp8;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(bad.status().message(),
              absl::StrCat("unknown dtype \"", fp8,
                           "\" (accepted: auto, float32, float, float16, half, bfloat16)"));
    EXPECT_EQ(FindFlagDType(fp8), std::nullopt);
  }
  EXPECT_FALSE(ParseSafetensorsDType("F8_E4M3").ok());
  EXPECT_FALSE(ParseSafetensorsDType("F8_E5M2").ok());
  EXPECT_EQ(ParseSafetensorsDType("F8").status().message(),
            "unsupported dtype \"F8\" (supported: F32, F16, BF16)");
}

TEST(DTypeFlagTest, KvCacheFlagTakesExactlyVllmsNames) {
  EXPECT_EQ(*ParseKvCacheDTypeFlag("auto"), std::nullopt);
  EXPECT_EQ(*ParseKvCacheDTypeFlag(""), std::nullopt);
  EXPECT_EQ(*ParseKvCacheDTypeFlag("float32"), DType::kF32);
  EXPECT_EQ(*ParseKvCacheDTypeFlag("float16"), DType::kF16);
  EXPECT_EQ(*ParseKvCacheDTypeFlag("bfloat16"), DType::kBF16);
  EXPECT_EQ(*ParseKvCacheDTypeFlag("fp8"), DType::kFp8E4M3);
  EXPECT_EQ(*ParseKvCacheDTypeFlag("fp8_e4m3"), DType::kFp8E4M3);
  EXPECT_EQ(DTypeSize(DType::kFp8E4M3), 1u);
  for (const char* bad_value : {"half", "float", "Auto", "bfloat16 ", "fp8e4m3", "F8_E4M3"}) {
    const auto bad = ParseKvCacheDTypeFlag(bad_value);
    ASSERT_FALSE(bad.ok()) << bad_value;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        bad.status().message(),
        absl::StrCat("unknown kv cache dtype \"", bad_value,
                     "\" (accepted: auto, float32, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2)"));
  }
  EXPECT_EQ(*ParseKvCacheDTypeFlag("fp8_e5m2"), DType::kFp8E5M2);
  EXPECT_EQ(DTypeSize(DType::kFp8E5M2), 1u);
}

TEST(DTypeFlagTest, ConvertFromFloatRoundsLikeTheScalarConversions) {
  const float values[] = {0.0f, -1.5f, 3.14159265f, 65504.0f, 1e-8f, -2.71828f};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4M3, DType::kFp8E5M2}) {
    std::vector<unsigned char> stored(sizeof(values));
    ConvertFromFloat(dtype, values, 6, stored.data());
    float back[6];
    ConvertToFloat(dtype, stored.data(), 6, back);
    for (int i = 0; i < 6; ++i) {
      const float want = dtype == DType::kF32       ? values[i]
                         : dtype == DType::kF16     ? HalfToFloat(FloatToHalf(values[i]))
                         : dtype == DType::kBF16    ? BFloat16ToFloat(FloatToBFloat16(values[i]))
                         : dtype == DType::kFp8E4M3 ? Fp8E4M3ToFloat(FloatToFp8E4M3(values[i]))
                                                    : Fp8E5M2ToFloat(FloatToFp8E5M2(values[i]));
      EXPECT_EQ(back[i], want) << DTypeName(dtype) << " " << values[i];
    }
  }
  ConvertFromFloat(DType::kBF16, nullptr, 0, nullptr);  // Empty is a no-op.
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

// The nearest finite E5M2 code to `value` (|value| <= 57344) by search over
// every code, ties to the even code: independent of FloatToFp8E5M2's bits.
uint8_t NearestE5M2BySearch(float value) {
  int best = 0;
  double best_distance = INFINITY;
  for (int code = 0; code <= 0x7B; ++code) {
    const double distance = std::abs(std::abs(static_cast<double>(value)) - Fp8E5M2ToFloat(code));
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(value) ? 0x80 : 0));
}

TEST(Fp8E5M2Test, EveryCodeIsAHalfsTopByteAndRoundingIsNearestEvenSaturated) {
  std::vector<float> values;
  for (int code = 0; code < 256; ++code) {
    const float v = Fp8E5M2ToFloat(static_cast<uint8_t>(code));
    const float half = HalfToFloat(static_cast<uint16_t>(code << 8));
    if (std::isnan(half)) {
      ASSERT_TRUE(std::isnan(v)) << code;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(v), std::bit_cast<uint32_t>(half)) << code;  // Signs too.
    }
    if ((code & 0x7C) == 0x7C) continue;  // Infinities and NaNs.
    EXPECT_EQ(FloatToFp8E5M2(v), code) << code;
    values.push_back(v);
    // Midway to the next code up, and a little either side of it.
    if ((code & 0x7F) < 0x7B) {
      const float next = Fp8E5M2ToFloat(static_cast<uint8_t>(code + 1));
      const float mid = (v + next) / 2;  // Exact: both are short binary fractions.
      values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f),
                                   std::nextafter(mid, -1e9f)});
    }
  }
  for (float v : values) {
    EXPECT_EQ(FloatToFp8E5M2(v), NearestE5M2BySearch(v)) << v;
  }
  EXPECT_EQ(FloatToFp8E5M2(1e9f), 0x7B);  // Saturated to 57344, infinities too.
  EXPECT_EQ(FloatToFp8E5M2(-INFINITY), 0xFB);
  EXPECT_EQ(FloatToFp8E5M2(61439.0f), 0x7B);
  EXPECT_TRUE(std::isnan(Fp8E5M2ToFloat(FloatToFp8E5M2(NAN))));
  EXPECT_EQ(FloatToFp8E5M2(1e-30f), 0x00);
  EXPECT_EQ(FloatToFp8E5M2(-1e-30f), 0x80);
}

}  // namespace
}  // namespace pagoda
