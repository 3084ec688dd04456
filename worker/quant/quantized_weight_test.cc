// QuantizedWeight's tensor-parallel slicing and q/k/v stacking: the slices
// dequantize to the slices of the whole, a slice that would split a group
// of contiguous inputs is refused naming the sizes (act-order weights slice
// anywhere), and parts that cannot run as one product are refused; and the FP8
// E4M3 conversions (every code, every rounding boundary, saturation).

#include "worker/quant/quantized_weight.h"

#include <cmath>

#include <gtest/gtest.h>

namespace pagoda::worker {
namespace {

QuantizedWeight Numbered(int64_t out, int64_t in, int64_t group_size) {
  QuantizedWeight w = SizedWeight("m", 4, out, in, in / group_size);
  for (int64_t k = 0; k < out * in; ++k) w.codes[k] = static_cast<uint8_t>(k % 16);
  for (size_t k = 0; k < w.scales.size(); ++k) {
    w.scales[k] = 0.5f + static_cast<float>(k);
    w.zeros[k] = static_cast<float>(k % 3);
  }
  for (int64_t i = 0; i < in; ++i) w.group_of_input[i] = static_cast<int32_t>(i / group_size);
  return w;
}

TEST(QuantizedWeightTest, SlicesDequantizeToTheSlicesOfTheWhole) {
  const QuantizedWeight w = Numbered(6, 64, 16);
  const QuantizedWeight rows = SliceOutputs(w, 2, 5);
  ASSERT_EQ(rows.out_features, 3);
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(rows.Dequantized(o, i), w.Dequantized(o + 2, i));
  }
  auto inputs = SliceInputs(w, 16, 48);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  ASSERT_EQ(inputs->in_features, 32);
  for (int64_t o = 0; o < 6; ++o) {
    for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(inputs->Dequantized(o, i), w.Dequantized(o, i + 16));
  }
}

TEST(QuantizedWeightTest, SliceSplittingAGroupIsRefusedUnlessActOrder) {
  QuantizedWeight w = Numbered(2, 64, 32);
  auto split = SliceInputs(w, 0, 48);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().message(),
            "m: tensor parallelism would split a quantization group: input features [0, 48) of 64 "
            "in groups of 32");
  std::swap(w.group_of_input[0], w.group_of_input[63]);  // Act-order: any slice.
  EXPECT_TRUE(SliceInputs(w, 0, 48).ok());
  EXPECT_TRUE(SliceInputs(Numbered(2, 64, 64), 0, 48).ok());  // Per-channel scales.
}

TEST(QuantizedWeightTest, StacksRowsAndRefusesPartsThatDiffer) {
  QuantizedWeight q = Numbered(4, 32, 16), k = Numbered(2, 32, 16);
  k.name = "k";
  auto stacked = StackOutputs({q, k}, "qkv");
  ASSERT_TRUE(stacked.ok()) << stacked.status();
  ASSERT_EQ(stacked->out_features, 6);
  for (int64_t i = 0; i < 32; ++i) {
    EXPECT_EQ(stacked->Dequantized(1, i), q.Dequantized(1, i));
    EXPECT_EQ(stacked->Dequantized(5, i), k.Dequantized(1, i));
  }
  std::swap(k.group_of_input[0], k.group_of_input[31]);
  auto mismatch = StackOutputs({q, k}, "qkv");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().message(),
            "k: its bits, code type, input quantization, input features, groups or g_idx differ "
            "from m's, and the two are run as one product");
}

TEST(Fp8E4M3, EveryCodeRoundTripsAndRoundingIsNearestEvenSaturated) {
  for (int code = 0; code < 256; ++code) {
    if (IsFp8E4M3Nan(static_cast<uint8_t>(code))) continue;
    EXPECT_EQ(FloatToFp8E4M3(Fp8E4M3ToFloat(static_cast<uint8_t>(code))), code) << code;
  }
  EXPECT_EQ(Fp8E4M3ToFloat(0x01), 0x1p-9f);
  EXPECT_EQ(Fp8E4M3ToFloat(0x7E), 448.0f);
  EXPECT_EQ(Fp8E4M3ToFloat(0xB8), -1.0f);
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);       // Between 1 and 1.125: to 1 (even).
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3A);       // Between 1.125 and 1.25: to 1.25.
  EXPECT_EQ(FloatToFp8E4M3(3 * 0x1p-10f), 0x02);  // Subnormal tie: 1.5 steps to 2.
  EXPECT_EQ(FloatToFp8E4M3(1e9f), 0x7E);
  EXPECT_EQ(FloatToFp8E4M3(-500.0f), 0xFE);
  EXPECT_EQ(FloatToFp8E4M3(0.9999f * 0x1p-6f), 0x08);  // Rounds up into the normals.
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
  // Every f32 between two neighbours goes to the nearer (ties to even).
  for (int code = 0; code < 0x7E; ++code) {
    const float low = Fp8E4M3ToFloat(code), high = Fp8E4M3ToFloat(code + 1);
    const float mid = (low + high) / 2;
    EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, low)), code);
    EXPECT_EQ(FloatToFp8E4M3(std::nextafter(mid, high)), code + 1);
    EXPECT_EQ(FloatToFp8E4M3(mid), code % 2 == 0 ? code : code + 1);
  }
}

TEST(QuantizedWeightTest, Fp8StackTakesTheLargestStaticInputScale) {
  QuantizedWeight q = SizedWeight("q", 8, 2, 4, 1), k = SizedWeight("k", 8, 1, 4, 1);
  for (QuantizedWeight* w : {&q, &k}) {
    w->code_type = CodeType::kFloat8E4M3;
    w->input_quant = InputQuant::kFp8Static;
    for (auto& scale : w->scales) scale = 0.5f;
    w->codes.assign(w->codes.size(), 0x38);  // 1.0
  }
  q.input_scale = 0.25f;
  k.input_scale = 0.75f;
  auto stacked = StackOutputs({q, k}, "qkv");
  ASSERT_TRUE(stacked.ok()) << stacked.status();
  EXPECT_EQ(stacked->input_scale, 0.75f);
  EXPECT_EQ(stacked->Dequantized(2, 3), 0.5f);
  k.input_quant = InputQuant::kFp8PerToken;
  EXPECT_FALSE(StackOutputs({q, k}, "qkv").ok());
}

}  // namespace
}  // namespace pagoda::worker
