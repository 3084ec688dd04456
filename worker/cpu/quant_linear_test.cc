// The CPU weight-only int4/int8 Linear against a plain float64 loop over the
// exactly dequantized weight ((code - zero) * scale, QuantizedWeight's rule),
// at every SIMD level this CPU runs: odd output counts, group sizes that are
// and are not multiples of the kernels' 32-code chunk, act-order group
// indices in random order, token counts that leave partial tiles of the
// kernels' four (AVX2) or eight (AVX-512) rows,
// with and without bias, on one and several threads; with f32 inputs
// (kFloat32) and with inputs quantized to int8 per group (kInt8, against a
// loop that quantizes them as the rule says). The int8-input kernels
// (quant_a8_kernels.h) against an integer loop at every level, with the
// extreme codes and inputs. And the backend's CreateQuantizedLinear gives
// the same Linear. The tile kernels of the VNNI level's layout
// (quant_tile_kernels.h) against an integer loop and against each other.

#include "worker/cpu/quant_linear.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/quant_a8_kernels.h"
#include "worker/cpu/quant_tile_kernels.h"
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

// x with each row's inputs of each group quantized to int8 and back (q * s),
// the rule of WeightOnlyActivations::kInt8, computed in f32 as it says.
std::vector<float> QuantizedPerGroup(const QuantizedWeight& w, const std::vector<float>& x,
                                     int rows) {
  std::vector<float> out(x.size());
  for (int r = 0; r < rows; ++r) {
    const float* row = x.data() + r * w.in_features;
    for (int64_t g = 0; g < w.num_groups; ++g) {
      float amax = 0.0f;
      for (int64_t i = 0; i < w.in_features; ++i) {
        if (w.group_of_input[i] == g) amax = std::max(amax, std::fabs(row[i]));
      }
      const float scale = amax / 127.0f;
      for (int64_t i = 0; i < w.in_features; ++i) {
        if (w.group_of_input[i] != g) continue;
        const float q =
            scale == 0.0f ? 0.0f : std::clamp(std::nearbyint(row[i] / scale), -128.0f, 127.0f);
        out[r * w.in_features + i] = q * scale;
      }
    }
  }
  return out;
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
                   const std::string& label,
                   WeightOnlyActivations activations = WeightOnlyActivations::kFloat32) {
  ASSERT_EQ(linear.in_features(), w.in_features);
  ASSERT_EQ(linear.out_features(), w.out_features);
  // 40 and 70 rows: the prompt paths (quant_linear.cc): dequantized panels,
  // or with the tile layout (int8 inputs) two blocks of token rows.
  for (int rows : {1, 2, 3, 4, 5, 8, 9, 17, 40, 70}) {
    if (rows == 70 && activations == WeightOnlyActivations::kFloat32) continue;
    std::vector<float> x(static_cast<size_t>(rows) * w.in_features);
    for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> y(rows * w.out_features + 1, 1234.5f);  // Guard past the end.
    linear.Forward(x.data(), rows, y.data());
    const std::vector<double> want = Reference(
        w, activations == WeightOnlyActivations::kInt8 ? QuantizedPerGroup(w, x, rows) : x, rows);
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_NEAR(y[k], want[k], 2e-4 * (1.0 + std::abs(want[k])))
          << label << " rows=" << rows << " element " << k;
    }
    EXPECT_EQ(y[rows * w.out_features], 1234.5f) << label << ": wrote past the output";
  }
}

const Shape kShapes[] = {{4, 1, 32, 32, false},
                         {4, 7, 64, 32, false},
                         {4, 33, 128, -1, false},
                         {4, 5, 96, 48, false},
                         {4, 9, 40, 8, true},
                         {4, 16, 256, 128, true},
                         {8, 3, 32, 32, false},
                         {8, 13, 100, 50, false},
                         {8, 6, 96, 24, true},
                         {8, 17, 160, -1, false},
                         // Wider than one L1 block of x (quant_linear.cc's kBlockXBytes
                         // over the token rows of a kernel call): several blocks a row.
                         {4, 3, 2336, 32, false},
                         {8, 2, 2200, 200, true}};

class CpuQuantLinearTest : public testing::TestWithParam<int> {};

TEST_P(CpuQuantLinearTest, MatchesFloat64DequantizedAtEveryLevel) {
  ThreadPool pool(GetParam());
  std::mt19937 rng(11);
  for (WeightOnlyActivations activations :
       {WeightOnlyActivations::kFloat32, WeightOnlyActivations::kInt8}) {
    for (SimdLevel level : SupportedSimdLevels()) {
      for (const Shape& shape : kShapes) {
        for (bool with_bias : {false, true}) {
          QuantizedWeight w = RandomWeight(shape, rng);
          if (with_bias) {
            for (int64_t o = 0; o < shape.out; ++o) w.bias.push_back(0.25f * static_cast<float>(o));
          }
          // With int8 inputs at a vector level, the AVX2 tiles without
          // VNNI too (the path of a CPU without it).
          const bool no_vnni = activations == WeightOnlyActivations::kInt8 &&
                               level == SimdLevel::kAvx2 && Avx2QuantTileKernels(false) != nullptr;
          for (Int8Layout layout : {Int8Layout::kBest, Int8Layout::kTilesNoVnni}) {
            if (layout == Int8Layout::kTilesNoVnni && !no_vnni) continue;
            auto linear = CreateCpuQuantLinear(w, &pool, level, activations, layout);
            ExpectMatches(*linear, w, rng,
                          std::string(SimdLevelName(level)) +
                              (layout == Int8Layout::kTilesNoVnni ? " tiles without vnni" : "") +
                              (activations == WeightOnlyActivations::kInt8 ? " int8 inputs" : "") +
                              " int" + std::to_string(shape.bits) + " [" +
                              std::to_string(shape.out) + ", " + std::to_string(shape.in) +
                              "] group " + std::to_string(shape.group_size) +
                              (shape.act_order ? " act-order" : "") + (with_bias ? " bias" : ""),
                          activations);
          }
        }
      }
    }
  }
}

// A row of int8 inputs with a NaN in one group: that group's products are
// NaN, so every output is, as with f32 inputs (int8 has no NaN to carry).
TEST_P(CpuQuantLinearTest, NanInputGivesNanOutputsWithInt8Inputs) {
  ThreadPool pool(GetParam());
  std::mt19937 rng(13);
  const QuantizedWeight w = RandomWeight({4, 5, 64, 32, false}, rng);
  for (SimdLevel level : SupportedSimdLevels()) {
    auto linear = CreateCpuQuantLinear(w, &pool, level, WeightOnlyActivations::kInt8);
    for (int rows : {2, 40}) {
      std::vector<float> x(rows * 64, 0.5f);
      x[64 + 40] = std::numeric_limits<float>::quiet_NaN();  // Row 1, group 1.
      std::vector<float> y(rows * 5);
      linear->Forward(x.data(), rows, y.data());
      for (int o = 0; o < 5; ++o) {
        EXPECT_FALSE(std::isnan(y[o])) << SimdLevelName(level) << " rows " << rows;
        EXPECT_TRUE(std::isnan(y[5 + o])) << SimdLevelName(level) << " rows " << rows;
      }
    }
  }
}

// The int8-input kernels' integer sums against a plain loop, exactly: unit
// scales, zero offsets, segments of one to five chunks (the VNNI kernel's
// lone last chunk included), 1 to max_rows token rows, the largest code
// against -128 (a pair 2 * 255 * -128 that vpmaddubsw would saturate).
TEST(QuantA8Kernels, IntegerSumsEqualPlainLoopAtEveryLevel) {
  std::mt19937 rng(14);
  const std::vector<QuantSegment> segments = {{0, 32, 0}, {32, 96, 1}, {128, 64, 2}, {192, 160, 3}};
  const int64_t padded = 352;
  const std::vector<float> params = {1, 0, 1, 0, 1, 0, 1, 0};
  for (int bits : {4, 8}) {
    std::vector<int> codes(padded);
    for (int& c : codes) c = static_cast<int>(rng() % (1u << bits));
    codes[33] = codes[200] = (1 << bits) - 1;
    std::vector<uint8_t> packed(padded * bits / 8, 0);
    for (int64_t p = 0; p < padded; ++p) {
      if (bits == 8) {
        packed[p] = static_cast<uint8_t>(codes[p]);
        continue;
      }
      const int64_t in_chunk = p % kQuantChunk;
      packed[(p / kQuantChunk) * 16 + in_chunk % 16] |=
          static_cast<uint8_t>(in_chunk < 16 ? codes[p] : codes[p] << 4);
    }
    for (SimdLevel level : SupportedSimdLevels()) {
      const QuantA8Kernels& kernels = QuantA8KernelsFor(level);
      for (int rows = 1; rows <= kernels.max_rows; ++rows) {
        std::vector<int8_t> x(rows * padded);
        for (auto& v : x) v = static_cast<int8_t>(rng());
        for (int r = 0; r < rows; ++r) x[r * padded + 33] = x[r * padded + 200] = -128;
        const std::vector<float> ones(rows * segments.size(), 1.0f);
        const std::vector<float> zeros(rows * segments.size(), 0.0f);
        std::vector<float> y(rows, -1.0f);
        (bits == 4 ? kernels.row_int4 : kernels.row_int8)(
            packed.data(), params.data(), segments.data(), 4, x.data(), padded, ones.data(),
            zeros.data(), rows, rows, y.data(), 1, false);
        for (int r = 0; r < rows; ++r) {
          int64_t want = 0;
          for (int64_t p = 0; p < padded; ++p) want += codes[p] * int64_t{x[r * padded + p]};
          EXPECT_EQ(y[r], static_cast<float>(want))
              << kernels.name << " int" << bits << " rows " << rows << " row " << r;
        }
      }
    }
  }
}

// The vector tile kernels this CPU runs, named: AVX-512 VNNI, AVX2 with
// AVX-VNNI, AVX2 with vpmaddubsw + vpmaddwd.
std::vector<std::pair<std::string, const QuantTileKernels*>> VectorTileKernels() {
  std::vector<std::pair<std::string, const QuantTileKernels*>> tables;
  if (VnniQuantTileKernels() != nullptr) tables.emplace_back("avx512 vnni", VnniQuantTileKernels());
  if (Avx2QuantTileKernels(true) != nullptr) {
    tables.emplace_back("avx2 avx-vnni", Avx2QuantTileKernels(true));
  }
  if (Avx2QuantTileKernels(false) != nullptr) {
    tables.emplace_back("avx2 vpmaddubsw", Avx2QuantTileKernels(false));
  }
  return tables;
}

// The tile kernels (quant_tile_kernels.h): the plain loop's integer sums
// against an integer loop over the unpacked codes, exactly (unit scales, zero
// offsets), and every vector kernel against the plain loop bit for bit with
// random scales and offsets: 1 to 8 token rows, 1 to 16 tile rows, segments
// of one to nine chunks (longer than the AVX2 kernels' 256-input block) in
// an order that is not the groups', the largest code against -128.
TEST(QuantTileKernels, VectorKernelsEqualPlainLoopAtEveryShape) {
  std::mt19937 rng(15);
  const std::vector<QuantSegment> segments = {
      {0, 32, 2}, {32, 96, 0}, {128, 64, 3}, {192, 160, 1}, {352, 288, 4}};
  const int64_t padded = 640;
  const int num_groups = 5;
  for (int bits : {4, 8}) {
    std::vector<int> codes(kQuantTileRows * padded);
    for (int& c : codes) c = static_cast<int>(rng() % (1u << bits));
    codes[33] = codes[5 * padded + 200] = codes[15 * padded + 351] = (1 << bits) - 1;
    std::vector<uint8_t> tile(QuantTileBytes(padded, bits));
    PackQuantTile(
        bits, padded, [&](int j, int64_t p) { return codes[j * padded + p]; }, tile.data());
    std::vector<float> unit(num_groups * 2 * kQuantTileRows, 0.0f);
    std::vector<float> params(unit.size());
    for (int g = 0; g < num_groups; ++g) {
      for (int j = 0; j < kQuantTileRows; ++j) {
        unit[g * 2 * kQuantTileRows + j] = 1.0f;
        params[g * 2 * kQuantTileRows + j] =
            std::uniform_real_distribution<float>(0.001f, 0.05f)(rng);
        params[g * 2 * kQuantTileRows + kQuantTileRows + j] =
            std::uniform_real_distribution<float>(-0.5f, 0.5f)(rng);
      }
    }
    const QuantTileKernels& plain = PlainQuantTileKernels();
    for (int rows = 1; rows <= kQuantTileMaxTokens; ++rows) {
      std::vector<int8_t> x(rows * padded);
      for (auto& v : x) v = static_cast<int8_t>(rng());
      for (int r = 0; r < rows; ++r) x[r * padded + 33] = x[r * padded + 200] = -128;
      std::vector<float> x_scale(rows * segments.size()), x_sum(x_scale.size());
      for (float& v : x_scale) v = std::uniform_real_distribution<float>(0.001f, 0.01f)(rng);
      for (float& v : x_sum) v = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
      const std::vector<float> ones(x_scale.size(), 1.0f), zeros(x_scale.size(), 0.0f);
      for (int cols : {1, 5, 16}) {
        const auto run = [&](const QuantTileKernels& k, const std::vector<float>& p,
                             const std::vector<float>& scale, const std::vector<float>& sum) {
          std::vector<float> y(rows * 17, -1.0f);  // ld 17: lanes past cols stay -1.
          (bits == 4 ? k.tile_int4 : k.tile_int8)(
              tile.data(), p.data(), segments.data(), num_groups, x.data(), padded, scale.data(),
              sum.data(), rows, rows, y.data(), 17, cols, tile.data());
          return y;
        };
        const std::vector<float> sums = run(plain, unit, ones, zeros);
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < 17; ++j) {
            int64_t want = -1;
            if (j < cols) {
              want = 0;
              for (int64_t p = 0; p < padded; ++p) {
                want += codes[j * padded + p] * int64_t{x[r * padded + p]};
              }
            }
            ASSERT_EQ(sums[r * 17 + j], static_cast<float>(want))
                << "plain int" << bits << " rows " << rows << " row " << r << " col " << j;
          }
        }
        const std::vector<float> scaled = run(plain, params, x_scale, x_sum);
        for (const auto& [name, kernels] : VectorTileKernels()) {
          EXPECT_EQ(run(*kernels, unit, ones, zeros), sums)
              << name << " int" << bits << " rows " << rows << " cols " << cols;
          EXPECT_EQ(run(*kernels, params, x_scale, x_sum), scaled)
              << name << " int" << bits << " rows " << rows << " cols " << cols;
        }
      }
    }
  }
}

// The vector group quantization against the plain loop, bit for bit, and
// the plain loop against the rule computed here: values halfway between
// steps (round half to even), all zeros, a NaN, an infinity.
TEST(QuantTileKernels, QuantizeGroupEqualsRuleAtEveryLevel) {
  std::mt19937 rng(16);
  std::vector<std::vector<float>> groups(4, std::vector<float>(48));
  for (float& v : groups[0]) v = std::uniform_real_distribution<float>(-3.0f, 3.0f)(rng);
  for (size_t i = 0; i < groups[1].size(); ++i) {
    groups[1][i] = 0.25f * static_cast<float>(2 * i + 1) - 12.0f;
  }
  groups[1][47] = 63.5f;  // s = 0.5: x / s lands on halves.
  groups[3] = groups[0];
  groups[3][20] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> cases = groups;
  cases.push_back(groups[0]);
  cases.back()[7] = std::numeric_limits<float>::infinity();
  std::vector<const QuantTileKernels*> levels = {&PlainQuantTileKernels()};
  for (const auto& table : VectorTileKernels()) levels.push_back(table.second);
  for (const std::vector<float>& x : cases) {
    float amax = 0.0f;
    bool finite = true;
    for (float v : x) {
      amax = std::max(amax, std::fabs(v));
      finite &= std::isfinite(v);
    }
    const float want_scale = amax / 127.0f;
    for (const QuantTileKernels* kernels : levels) {
      std::vector<int8_t> q(x.size(), 99);
      float scale = -1.0f, qsum = -1.0f;
      kernels->quantize_group(x.data(), static_cast<int64_t>(x.size()), q.data(), &scale, &qsum);
      if (!finite) {
        EXPECT_TRUE(std::isnan(scale) && std::isnan(qsum));
        continue;
      }
      int32_t sum = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = want_scale == 0.0f
                               ? 0.0f
                               : std::clamp(std::nearbyint(x[i] / want_scale), -128.0f, 127.0f);
        ASSERT_EQ(q[i], static_cast<int8_t>(want)) << "input " << i;
        sum += q[i];
      }
      EXPECT_EQ(scale, want_scale);
      EXPECT_EQ(qsum, want_scale * static_cast<float>(sum));
    }
  }
}

// With int8 inputs, a token's outputs take the same steps in every tile
// kernel (AVX-512 VNNI, AVX2 with and without AVX-VNNI: exact sums, the
// plain loop's f32 steps) and whatever runs beside it: the same bits alone,
// in batches of 1 to 8 and in a prompt of 70 rows, for 4- and 8-bit codes,
// act-order, a bias, and a group longer than the AVX2 kernels' 256-input
// block.
TEST_P(CpuQuantLinearTest, Int8InputsGiveTheSameBitsInEveryTileKernel) {
  ThreadPool pool(GetParam());
  std::mt19937 rng(17);
  std::vector<std::pair<std::string, std::unique_ptr<Linear>>> linears;
  for (const Shape& shape : {Shape{4, 37, 640, 320, true}, Shape{8, 21, 352, 32, false}}) {
    QuantizedWeight w = RandomWeight(shape, rng);
    for (int64_t o = 0; o < shape.out; ++o) w.bias.push_back(0.125f * static_cast<float>(o));
    const WeightOnlyActivations int8 = WeightOnlyActivations::kInt8;
    linears.clear();
    for (SimdLevel level : SupportedSimdLevels()) {
      if (level == SimdLevel::kPlain) continue;  // The row layout.
      linears.emplace_back(std::string(SimdLevelName(level)),
                           CreateCpuQuantLinear(w, &pool, level, int8));
    }
    if (Avx2QuantTileKernels(false) != nullptr) {
      linears.emplace_back(
          "avx2 tiles without vnni",
          CreateCpuQuantLinear(w, &pool, SimdLevel::kAvx2, int8, Int8Layout::kTilesNoVnni));
    }
    constexpr int kPrompt = 70;
    std::vector<float> x(kPrompt * shape.in);
    for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    std::vector<float> reference;
    for (const auto& [name, linear] : linears) {
      const std::string where = name + " int" + std::to_string(shape.bits);
      std::vector<float> prompt(kPrompt * shape.out);
      linear->Forward(x.data(), kPrompt, prompt.data());
      if (reference.empty()) reference = prompt;
      EXPECT_EQ(prompt, reference) << where;
      for (int batch = 1; batch <= kQuantTileMaxTokens; ++batch) {
        const int first = kPrompt - batch;
        std::vector<float> y(batch * shape.out);
        linear->Forward(x.data() + first * shape.in, batch, y.data());
        EXPECT_TRUE(std::equal(y.begin(), y.end(), prompt.begin() + first * shape.out))
            << where << " batch " << batch;
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
  ExpectMatches(**linear, w, rng, "backend", WeightOnlyActivations::kInt8);
  auto exact_backend = CreateCpuBackend(GetParam(), WeightOnlyActivations::kFloat32);
  auto exact = exact_backend->CreateQuantizedLinear(w);
  ASSERT_TRUE(exact.ok()) << exact.status();
  ExpectMatches(**exact, w, rng, "backend float32 inputs");
  // Packed codes (half a byte each at 4 bits) and two f32 per group.
  EXPECT_EQ((*linear)->weight_bytes(), 19u * 96 / 2 + 19u * 3 * 2 * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuQuantLinearTest, testing::Values(1, 3));

}  // namespace
}  // namespace pagoda::worker
