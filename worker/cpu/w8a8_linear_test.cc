// The CPU W8A8 int8 and FP8 kernels and Linear (w8a8_kernels.h,
// w8a8_linear.h) at every SIMD level this CPU runs: the int8 dot exactly
// equal to a plain integer loop, the FP8 dot against a float64 sum over the
// codes' exact values, over lengths and token counts that leave partial
// tiles; then the Linear over odd shapes (inputs not a multiple of the
// 64-code chunk, odd output counts, 1 to 9 token rows, bias) against a
// float64 loop that quantizes each token row as the formats define it. The
// backend's CreateQuantizedLinear picks this Linear for those weights; a NaN
// input row gives NaN outputs (int8 has no NaN to carry it). The int8 tile
// kernels (quant_tile_kernels.h's W8A8TileKernels) equal an integer loop
// over the unpacked codes bit for bit, and a token's int8 outputs are the
// same bits alone, in a batch or in a prompt of 70 rows, in either layout
// and at every level.

#include "worker/cpu/w8a8_linear.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/fp8.h"
#include "gtest/gtest.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/quant_tile_kernels.h"
#include "worker/cpu/w8a8_kernels.h"

namespace pagoda::worker {
namespace {

// A random byte that is no E4M3 NaN.
uint8_t RandomCode(std::mt19937& rng) {
  uint8_t code = 0;
  do code = static_cast<uint8_t>(rng());
  while (IsFp8E4M3Nan(code));
  return code;
}

TEST(W8A8Kernels, Int8DotEqualsIntegerLoopAtEveryLevel) {
  std::mt19937 rng(3);
  for (SimdLevel level : SupportedSimdLevels()) {
    const W8A8Kernels& kernels = W8A8KernelsFor(level);
    for (int64_t n : {64, 128, 448}) {
      for (int rows = 1; rows <= kW8A8MaxRows; ++rows) {
        std::vector<uint8_t> codes(n);
        std::vector<int8_t> x(rows * (n + 64));
        for (auto& c : codes) c = static_cast<uint8_t>(rng());
        for (auto& v : x) v = static_cast<int8_t>(rng());
        codes[0] = 255;  // The extremes vpmaddubsw would saturate on.
        x[0] = -128;
        int32_t dots[kW8A8MaxRows];
        kernels.int8_dot(codes.data(), x.data(), n + 64, n, rows, dots);
        for (int r = 0; r < rows; ++r) {
          int64_t expected = 0;
          for (int64_t i = 0; i < n; ++i) expected += codes[i] * int64_t{x[r * (n + 64) + i]};
          EXPECT_EQ(dots[r], expected) << SimdLevelName(level) << " n " << n << " row " << r;
        }
      }
    }
  }
}

TEST(W8A8Kernels, Fp8DotMatchesFloat64SumAtEveryLevel) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (SimdLevel level : SupportedSimdLevels()) {
    const W8A8Kernels& kernels = W8A8KernelsFor(level);
    for (int64_t n : {64, 192, 320}) {
      for (int rows = 1; rows <= kW8A8MaxRows; ++rows) {
        std::vector<uint8_t> codes(n);
        std::vector<float> x(rows * n);
        for (auto& c : codes) c = RandomCode(rng);
        for (auto& v : x) v = normal(rng);
        codes[1] = 0x01;  // The smallest subnormal, 2^-9.
        codes[2] = 0xFE;  // -448.
        float dots[kW8A8MaxRows];
        kernels.fp8_dot(codes.data(), x.data(), n, n, rows, dots);
        for (int r = 0; r < rows; ++r) {
          double expected = 0.0, magnitude = 0.0;
          for (int64_t i = 0; i < n; ++i) {
            const double term = double{Fp8E4M3ToFloat(codes[i])} * x[r * n + i];
            expected += term;
            magnitude += std::fabs(term);
          }
          EXPECT_NEAR(dots[r], expected, 1e-6 * magnitude) << SimdLevelName(level) << " n " << n;
        }
      }
    }
  }
}

// The W8A8 tile kernels there are, named: the plain loop, AVX-512 VNNI,
// AVX2 with AVX-VNNI and AVX2 with vpmaddubsw + vpmaddwd where the CPU
// runs them.
std::vector<std::pair<std::string, const W8A8TileKernels*>> W8A8TileLevels() {
  std::vector<std::pair<std::string, const W8A8TileKernels*>> levels = {
      {"plain", &PlainW8A8TileKernels()}};
  if (VnniW8A8TileKernels() != nullptr) levels.emplace_back("avx512 vnni", VnniW8A8TileKernels());
  if (Avx2W8A8TileKernels(true) != nullptr) {
    levels.emplace_back("avx2 avx-vnni", Avx2W8A8TileKernels(true));
  }
  if (Avx2W8A8TileKernels(false) != nullptr) {
    levels.emplace_back("avx2 vpmaddubsw", Avx2W8A8TileKernels(false));
  }
  return levels;
}

// Every tile of an out x in weight (out and in not multiples of 16 and 64)
// against token rows 1..8: each output the integer loop's
//   float(sum_i code * q - 128 * sum(q)) * (x_scale * w_scale) + bias
// over the unpacked codes, bit for bit, with and without a bias; lanes past
// the tile's last row untouched.
TEST(W8A8TileKernels, EqualIntegerLoopBitForBitOverOddShapes) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> unit(0.001f, 0.05f);
  for (const auto& [name, kernels] : W8A8TileLevels()) {
    // 600 inputs: more than two of the AVX2 kernels' 256-input blocks.
    for (auto [out, in] : {std::pair<int64_t, int64_t>{37, 77}, {16, 64}, {5, 200}, {19, 600}}) {
      const int64_t padded = (in + kW8A8Chunk - 1) / kW8A8Chunk * kW8A8Chunk;
      std::vector<uint8_t> codes(out * in);
      for (auto& c : codes) c = static_cast<uint8_t>(rng());
      codes[0] = 255;  // 255 x -128, the largest product.
      codes[1] = 0;
      std::vector<float> w_scale(out), bias(out);
      for (int64_t o = 0; o < out; ++o) w_scale[o] = unit(rng), bias[o] = unit(rng) - 0.025f;
      for (int rows = 1; rows <= kQuantTileMaxTokens; ++rows) {
        std::vector<int8_t> x(rows * padded, 0);
        std::vector<float> x_scale(rows);
        std::vector<int32_t> x_sum(rows, 0);
        for (int r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < in; ++i) x[r * padded + i] = static_cast<int8_t>(rng());
          x[r * padded] = -128;
          for (int64_t i = 0; i < in; ++i) x_sum[r] += x[r * padded + i];
          x_scale[r] = unit(rng);
        }
        for (int64_t o0 = 0; o0 < out; o0 += kQuantTileRows) {
          const int cols = static_cast<int>(std::min<int64_t>(kQuantTileRows, out - o0));
          std::vector<uint8_t> tile(QuantTileBytes(padded, 8));
          PackQuantTile(
              8, padded,
              [&](int j, int64_t p) { return j < cols && p < in ? codes[(o0 + j) * in + p] : 0; },
              tile.data());
          std::vector<float> scales(kQuantTileRows, 0.0f), biases(kQuantTileRows, 0.0f);
          std::copy_n(&w_scale[o0], cols, scales.begin());
          std::copy_n(&bias[o0], cols, biases.begin());
          for (bool with_bias : {false, true}) {
            std::vector<float> y(rows * 17, -1.0f);  // ld 17: lanes past cols stay -1.
            kernels->tile(tile.data(), padded, x.data(), padded, x_scale.data(), x_sum.data(),
                          scales.data(), with_bias ? biases.data() : nullptr, rows, y.data(), 17,
                          cols, with_bias ? tile.data() : nullptr);
            for (int r = 0; r < rows; ++r) {
              for (int j = 0; j < cols; ++j) {
                int64_t dot = 0;
                for (int64_t i = 0; i < in; ++i) {
                  dot += int64_t{codes[(o0 + j) * in + i]} * x[r * padded + i];
                }
                float expected = static_cast<float>(dot - 128 * int64_t{x_sum[r]}) *
                                 (x_scale[r] * w_scale[o0 + j]);
                if (with_bias) expected += bias[o0 + j];
                ASSERT_EQ(y[r * 17 + j], expected)
                    << name << " out " << out << " in " << in << " rows " << rows << " r " << r
                    << " o " << o0 + j;
              }
              for (int j = cols; j < 17; ++j) ASSERT_EQ(y[r * 17 + j], -1.0f) << j;
            }
          }
        }
      }
    }
  }
}

// The per-token quantization at each level against the rule written out:
// halves (ties to even), zeros, lengths that leave a tail, NaN, infinity.
TEST(W8A8TileKernels, QuantizeTokenEqualsRuleAtEveryLevel) {
  std::mt19937 rng(9);
  std::vector<std::vector<float>> cases;
  for (int64_t n : {1, 15, 16, 17, 77, 130}) {
    std::vector<float> x(n);
    for (float& v : x) v = std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng);
    cases.push_back(x);
  }
  std::vector<float> halves(48);
  for (size_t i = 0; i < halves.size(); ++i)
    halves[i] = 0.25f * static_cast<float>(2 * i + 1) - 12.0f;
  halves[47] = 63.5f;  // s = 0.5: x / s lands on halves.
  cases.push_back(halves);
  cases.push_back(std::vector<float>(33, 0.0f));
  cases.push_back(cases[4]);
  cases.back()[76] = std::numeric_limits<float>::quiet_NaN();  // In the tail.
  cases.push_back(cases[3]);
  cases.back()[2] = -std::numeric_limits<float>::infinity();
  for (const std::vector<float>& x : cases) {
    const int64_t n = static_cast<int64_t>(x.size());
    float amax = 0.0f;
    bool finite = true;
    for (float v : x) amax = std::max(amax, std::fabs(v)), finite &= std::isfinite(v);
    const float s = amax / 127.0f;
    std::vector<int8_t> expected(n, 0);
    int32_t expected_sum = 0;
    for (int64_t i = 0; finite && s > 0.0f && i < n; ++i) {
      expected[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] / s), -128.0f, 127.0f));
      expected_sum += expected[i];
    }
    for (const auto& [name, kernels] : W8A8TileLevels()) {
      std::vector<int8_t> q(n + 1, 7);  // q[n] must stay.
      float scale = -1.0f;
      int32_t sum = -1;
      kernels->quantize_token(x.data(), n, q.data(), &scale, &sum);
      EXPECT_EQ(std::vector<int8_t>(q.begin(), q.begin() + n), expected) << "n " << n;
      EXPECT_EQ(q[n], 7);
      EXPECT_EQ(sum, expected_sum);
      if (finite) {
        EXPECT_EQ(scale, s);
      } else {
        EXPECT_TRUE(std::isnan(scale));
      }
    }
  }
}

struct Case {
  CodeType code_type;
  InputQuant input_quant;
  int64_t out;
  int64_t in;
};

QuantizedWeight RandomByteWeight(const Case& c, std::mt19937& rng) {
  QuantizedWeight w = SizedWeight("test", 8, c.out, c.in, 1);
  w.code_type = c.code_type;
  w.input_quant = c.input_quant;
  w.input_scale = 0.02f;
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  const bool fp8 = c.code_type == CodeType::kFloat8E4M3;
  for (auto& code : w.codes) code = fp8 ? RandomCode(rng) : static_cast<uint8_t>(rng());
  for (int64_t o = 0; o < c.out; ++o) {
    w.scales[o] = scale(rng);
    w.zeros[o] = fp8 ? 0.0f : 128.0f;
    w.bias.push_back(scale(rng));
  }
  return w;
}

// A token row quantized as the format defines it: the values q (float64)
// and the scale s, x ~ q * s.
std::vector<double> QuantizedRow(const Case& c, const float* x, double* s) {
  float amax = 0.0f;
  for (int64_t i = 0; i < c.in; ++i) amax = std::max(amax, std::fabs(x[i]));
  std::vector<double> q(c.in);
  if (c.input_quant == InputQuant::kInt8PerToken) {
    const float scale = amax / 127.0f;
    for (int64_t i = 0; i < c.in; ++i) q[i] = std::nearbyint(x[i] / scale);
    *s = scale;
    return q;
  }
  const float scale = c.input_quant == InputQuant::kFp8PerToken ? amax / 448.0f
                      : c.input_quant == InputQuant::kFp8Static ? 0.02f
                                                                : 1.0f;
  for (int64_t i = 0; i < c.in; ++i) {
    q[i] = c.input_quant == InputQuant::kNone ? x[i] : Fp8E4M3ToFloat(FloatToFp8E4M3(x[i] / scale));
  }
  *s = scale;
  return q;
}

// The layouts of the int8 codes: the best at the level (AVX2 and AVX-512
// tiles with the CPU's VNNI), the AVX2 tiles without VNNI, the rows.
constexpr W8A8Layout kLayouts[] = {W8A8Layout::kBest, W8A8Layout::kTilesNoVnni, W8A8Layout::kRows};

std::string LayoutName(W8A8Layout layout) {
  switch (layout) {
    case W8A8Layout::kBest:
      return " best";
    case W8A8Layout::kTilesNoVnni:
      return " tiles without vnni";
    case W8A8Layout::kRows:
      return " rows";
  }
  return "";
}

TEST(W8A8Linear, MatchesFloat64LoopOverOddShapesAtEveryLevel) {
  const std::vector<Case> cases = {{CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 37, 77},
                                   {CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 5, 130},
                                   {CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 19, 128},
                                   {CodeType::kFloat8E4M3, InputQuant::kFp8PerToken, 37, 77},
                                   {CodeType::kFloat8E4M3, InputQuant::kFp8Static, 19, 130},
                                   {CodeType::kFloat8E4M3, InputQuant::kNone, 21, 64}};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  for (SimdLevel level : SupportedSimdLevels()) {
    for (const Case& c : cases) {
      for (W8A8Layout layout : kLayouts) {
        const QuantizedWeight w = RandomByteWeight(c, rng);
        auto linear = CreateCpuW8A8Linear(w, &pool, level, layout);
        EXPECT_EQ(linear->weight_bytes(), c.out * ((c.in + 63) / 64 * 64) + 2 * c.out * 4);
        for (int rows : {1, 3, 9, 70}) {
          std::vector<float> x(rows * c.in), y(rows * c.out);
          for (auto& v : x) v = normal(rng);
          linear->Forward(x.data(), rows, y.data());
          for (int r = 0; r < rows; ++r) {
            double s = 0.0;
            const std::vector<double> q = QuantizedRow(c, x.data() + r * c.in, &s);
            for (int64_t o = 0; o < c.out; ++o) {
              double dot = 0.0, magnitude = 0.0;
              for (int64_t i = 0; i < c.in; ++i) {
                const double term = q[i] * w.Dequantized(o, i);
                dot += term;
                magnitude += std::fabs(term);
              }
              const double expected = dot * s + w.bias[o];
              EXPECT_NEAR(y[r * c.out + o], expected, 1e-5 * (magnitude * s + 1.0))
                  << SimdLevelName(level) << LayoutName(layout) << " out " << c.out << " in "
                  << c.in << " row " << r;
            }
          }
        }
      }
    }
  }
}

// A token's int8 W8A8 outputs take the same steps whatever runs beside it:
// the same bits alone, in decode batches of 3 and 8 and in a prompt of 70
// rows (two of the tile layout's row blocks, a partial call of 6; 300
// inputs, two of the AVX2 kernels' input blocks), in the tile layouts
// (AVX-512 VNNI, AVX2 with and without AVX-VNNI) and the
// and row layouts, at every level (the integer sums are exact and the f32
// steps the same).
TEST(W8A8Linear, Int8OutputsAreTheSameBitsAloneInABatchOrAPromptEverywhere) {
  std::mt19937 rng(10);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  const Case c{CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 37, 300};
  const QuantizedWeight w = RandomByteWeight(c, rng);
  constexpr int kPrompt = 70;
  std::vector<float> x(kPrompt * c.in);
  for (auto& v : x) v = normal(rng);
  std::vector<float> reference;  // The first Linear's prompt.
  for (SimdLevel level : SupportedSimdLevels()) {
    for (W8A8Layout layout : kLayouts) {
      auto linear = CreateCpuW8A8Linear(w, &pool, level, layout);
      const std::string where = std::string(SimdLevelName(level)) + LayoutName(layout);
      std::vector<float> prompt(kPrompt * c.out);
      linear->Forward(x.data(), kPrompt, prompt.data());
      if (reference.empty()) reference = prompt;
      EXPECT_EQ(prompt, reference) << where;
      for (int batch_rows : {3, 8}) {
        std::vector<float> batch(batch_rows * c.out);
        linear->Forward(x.data() + 60 * c.in, batch_rows, batch.data());
        EXPECT_TRUE(std::equal(batch.begin(), batch.end(), prompt.begin() + 60 * c.out))
            << where << " batch " << batch_rows;
      }
      for (int r : {0, 7, 63, 69}) {
        std::vector<float> alone(c.out);
        linear->Forward(x.data() + r * c.in, 1, alone.data());
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), prompt.begin() + r * c.out))
            << where << " row " << r;
      }
    }
  }
}

TEST(W8A8Linear, ANanInputRowGivesNanOutputsAndLeavesTheOthers) {
  std::mt19937 rng(7);
  ThreadPool pool(1);
  for (const Case& c : {Case{CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 8, 64},
                        Case{CodeType::kFloat8E4M3, InputQuant::kFp8PerToken, 8, 64}}) {
    auto linear = CreateCpuW8A8Linear(RandomByteWeight(c, rng), &pool, BestSimdLevel());
    std::vector<float> x(2 * 64, 0.5f), y(2 * 8);
    x[3] = std::numeric_limits<float>::quiet_NaN();
    linear->Forward(x.data(), 2, y.data());
    for (int o = 0; o < 8; ++o) {
      EXPECT_TRUE(std::isnan(y[o])) << o;
      EXPECT_TRUE(std::isfinite(y[8 + o])) << o;
    }
  }
}

TEST(W8A8Linear, BackendPicksItForW8A8AndFp8Weights) {
  std::mt19937 rng(6);
  auto backend = CreateCpuBackend(1);
  for (const Case& c : {Case{CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 8, 64},
                        Case{CodeType::kFloat8E4M3, InputQuant::kFp8PerToken, 8, 64}}) {
    auto linear = backend->CreateQuantizedLinear(RandomByteWeight(c, rng));
    ASSERT_TRUE(linear.ok()) << linear.status();
    // One byte a code and an f32 scale and bias a channel: this Linear's size.
    EXPECT_EQ((*linear)->weight_bytes(), 8 * 64 + 2 * 8 * 4);
  }
}

}  // namespace
}  // namespace pagoda::worker
