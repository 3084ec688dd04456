// The CPU weight-only int4/int8 Linear against a plain float64 loop over the
// exactly dequantized weight ((code - zero) * scale, QuantizedWeight's rule),
// at every SIMD level this CPU runs: odd output counts, group sizes that are
// and are not multiples of the kernels' 32-code chunk, act-order group
// indices in random order, token counts that leave partial tiles of the
// kernels' four (AVX2) or eight (AVX-512) rows,
// with and without bias, on one and several threads. And the backend's
// CreateQuantizedLinear gives the same Linear.

#include "worker/cpu/quant_linear.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/thread_pool.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {
namespace {

struct Shape {
  int bits;
  int64_t out;
  int64_t in;
  int64_t group_size;  // -1: one group.
  bool act_order;
};

QuantizedWeight RandomWeight(const Shape& shape, std::mt19937& rng) {
  QuantizedWeight w;
  w.name = "test";
  w.bits = shape.bits;
  w.out_features = shape.out;
  w.in_features = shape.in;
  const int64_t group_size = shape.group_size < 0 ? shape.in : shape.group_size;
  w.num_groups = shape.in / group_size;
  const int levels = 1 << shape.bits;
  std::uniform_int_distribution<int> code(0, levels - 1);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (int64_t k = 0; k < shape.out * shape.in; ++k) w.codes.push_back(code(rng));
  for (int64_t k = 0; k < shape.out * w.num_groups; ++k) {
    w.scales.push_back(scale(rng));
    w.zeros.push_back(static_cast<float>(code(rng)));
  }
  for (int64_t i = 0; i < shape.in; ++i) w.group_of_input.push_back(i / group_size);
  if (shape.act_order) std::shuffle(w.group_of_input.begin(), w.group_of_input.end(), rng);
  return w;
}

// y = x · Wᵀ (+ bias) in float64 over the dequantized weight.
std::vector<double> Reference(const QuantizedWeight& w, const std::vector<float>& x, int rows) {
  std::vector<double> y(static_cast<size_t>(rows) * w.out_features);
  for (int r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < w.out_features; ++o) {
      double sum = w.bias.empty() ? 0.0 : w.bias[o];
      for (int64_t i = 0; i < w.in_features; ++i) {
        const size_t g = o * w.num_groups + w.group_of_input[i];
        sum += (static_cast<double>(w.codes[o * w.in_features + i]) - w.zeros[g]) * w.scales[g] *
               x[r * w.in_features + i];
      }
      y[r * w.out_features + o] = sum;
    }
  }
  return y;
}

void ExpectMatches(Linear& linear, const QuantizedWeight& w, std::mt19937& rng,
                   const std::string& label) {
  ASSERT_EQ(linear.in_features(), w.in_features);
  ASSERT_EQ(linear.out_features(), w.out_features);
  // 40 rows: the dequantized-panel path of prompts (quant_linear.cc).
  for (int rows : {1, 2, 3, 4, 5, 8, 9, 17, 40}) {
    std::vector<float> x(static_cast<size_t>(rows) * w.in_features);
    for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> y(rows * w.out_features + 1, 1234.5f);  // Guard past the end.
    linear.Forward(x.data(), rows, y.data());
    const std::vector<double> want = Reference(w, x, rows);
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_NEAR(y[k], want[k], 2e-4 * (1.0 + std::abs(want[k])))
          << label << " rows=" << rows << " element " << k;
    }
    EXPECT_EQ(y[rows * w.out_features], 1234.5f) << label << ": wrote past the output";
  }
}

const Shape kShapes[] = {{4, 1, 32, 32, false},  {4, 7, 64, 32, false},   {4, 33, 128, -1, false},
                         {4, 5, 96, 48, false},  {4, 9, 40, 8, true},     {4, 16, 256, 128, true},
                         {8, 3, 32, 32, false},  {8, 13, 100, 50, false}, {8, 6, 96, 24, true},
                         {8, 17, 160, -1, false},
                         // Wider than one L1 block of x (quant_linear.cc's kBlockXBytes
                         // over the token rows of a kernel call): several blocks a row.
                         {4, 3, 2336, 32, false},  {8, 2, 2200, 200, true}};

class CpuQuantLinearTest : public testing::TestWithParam<int> {};

TEST_P(CpuQuantLinearTest, MatchesFloat64DequantizedAtEveryLevel) {
  ThreadPool pool(GetParam());
  std::mt19937 rng(11);
  for (SimdLevel level : SupportedSimdLevels()) {
    for (const Shape& shape : kShapes) {
      for (bool with_bias : {false, true}) {
        QuantizedWeight w = RandomWeight(shape, rng);
        if (with_bias) {
          for (int64_t o = 0; o < shape.out; ++o) w.bias.push_back(0.25f * static_cast<float>(o));
        }
        auto linear = CreateCpuQuantLinear(w, &pool, level);
        ExpectMatches(*linear, w, rng,
                      std::string(SimdLevelName(level)) + " int" + std::to_string(shape.bits) +
                          " [" + std::to_string(shape.out) + ", " + std::to_string(shape.in) +
                          "] group " + std::to_string(shape.group_size) +
                          (shape.act_order ? " act-order" : "") + (with_bias ? " bias" : ""));
      }
    }
  }
}

TEST_P(CpuQuantLinearTest, BackendBuildsTheSameLinear) {
  auto backend = CreateCpuBackend(GetParam());
  std::mt19937 rng(12);
  const QuantizedWeight w = RandomWeight({4, 19, 96, 32, true}, rng);
  auto linear = backend->CreateQuantizedLinear(w);
  ASSERT_TRUE(linear.ok()) << linear.status();
  ExpectMatches(**linear, w, rng, "backend");
  // Packed codes (half a byte each at 4 bits) and two f32 per group.
  EXPECT_EQ((*linear)->weight_bytes(), 19u * 96 / 2 + 19u * 3 * 2 * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuQuantLinearTest, testing::Values(1, 3));

}  // namespace
}  // namespace pagoda::worker
