// The CPU W8A8 int8 and FP8 kernels and Linear (w8a8_kernels.h,
// w8a8_linear.h) at every SIMD level this CPU runs: the int8 dot exactly
// equal to a plain integer loop, the FP8 dot against a float64 sum over the
// codes' exact values, over lengths and token counts that leave partial
// tiles; then the Linear over odd shapes (inputs not a multiple of the
// 64-code chunk, odd output counts, 1 to 9 token rows, bias) against a
// float64 loop that quantizes each token row as the formats define it. The
// backend's CreateQuantizedLinear picks this Linear for those weights; a NaN
// input row gives NaN outputs (int8 has no NaN to carry it).

#include "worker/cpu/w8a8_linear.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/fp8.h"
#include "gtest/gtest.h"
#include "worker/cpu/cpu_backend.h"
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

TEST(W8A8Linear, MatchesFloat64LoopOverOddShapesAtEveryLevel) {
  const std::vector<Case> cases = {{CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 37, 77},
                                   {CodeType::kUnsignedInt, InputQuant::kInt8PerToken, 5, 130},
                                   {CodeType::kFloat8E4M3, InputQuant::kFp8PerToken, 37, 77},
                                   {CodeType::kFloat8E4M3, InputQuant::kFp8Static, 19, 130},
                                   {CodeType::kFloat8E4M3, InputQuant::kNone, 21, 64}};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ThreadPool pool(2);
  for (SimdLevel level : SupportedSimdLevels()) {
    for (const Case& c : cases) {
      const QuantizedWeight w = RandomByteWeight(c, rng);
      auto linear = CreateCpuW8A8Linear(w, &pool, level);
      EXPECT_EQ(linear->weight_bytes(), c.out * ((c.in + 63) / 64 * 64) + 2 * c.out * 4);
      for (int rows : {1, 3, 9}) {
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
                << SimdLevelName(level) << " out " << c.out << " in " << c.in << " row " << r;
          }
        }
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
