// The CPU backend's typed ops against plain float64 loops on the same
// (rounded) weights: Linear at token counts that leave partial tiles and
// span several cache blocks, every weight dtype, odd sizes, with
// and without bias, on one and several threads; Embedding and RmsNorm on
// typed weights.

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/step_batch_test_util.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/simd.h"

namespace pagoda::worker {
namespace {

// A weight of `dtype` in backend memory and its exact values.
struct Weight {
  std::unique_ptr<Buffer> buffer;
  std::vector<float> values;
};

Weight MakeWeight(Backend& backend, DType dtype, size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> raw(n);
  for (float& v : raw) v = dist(rng);
  Weight w{backend.Allocate(dtype, n), std::vector<float>(n)};
  ConvertFromFloat(dtype, raw.data(), n, w.buffer->raw());
  ConvertToFloat(dtype, w.buffer->raw(), n, w.values.data());
  return w;
}

class CpuLinearTest : public testing::TestWithParam<int> {};

TEST_P(CpuLinearTest, MatchesFloat64LoopForEveryDTypeAndBatchSize) {
  auto backend = CreateCpuBackend(GetParam());
  std::mt19937 rng(3);
  constexpr int kOut = 131;
  // 1100: rows wider than a tile slice (two slices and a partial one).
  for (auto [dtype, kIn] : std::vector<std::pair<DType, int>>{{DType::kF32, 37},
                                                              {DType::kBF16, 37},
                                                              {DType::kF16, 37},
                                                              {DType::kF32, 1100},
                                                              {DType::kBF16, 1100}}) {
    Weight weight = MakeWeight(*backend, dtype, kOut * kIn, rng);
    const Tensor tensor = Tensor::Of(*weight.buffer, {kOut, kIn});
    std::vector<float> bias(kOut);
    for (float& b : bias) b = std::uniform_real_distribution<float>(-1, 1)(rng);
    // 600: a prompt over two of the panel product's row blocks and a part.
    // 5 and 6: one tile at AVX-512 (a speculative verify step's rows).
    for (int rows : {1, 2, 3, 5, 6, 7, 8, 9, 33, 70, 131, 600}) {
      for (bool with_bias : {false, true}) {
        std::vector<float> x(rows * kIn);
        for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
        std::vector<float> y(rows * kOut + 1, 1234.5f);  // Guard past the end.
        backend->Linear(x.data(), rows, tensor, with_bias ? bias.data() : nullptr, y.data(),
                        DType::kF32);
        for (int r = 0; r < rows; ++r) {
          for (int j = 0; j < kOut; ++j) {
            double want = with_bias ? bias[j] : 0.0;
            for (int i = 0; i < kIn; ++i) {
              want += static_cast<double>(x[r * kIn + i]) * weight.values[j * kIn + i];
            }
            ASSERT_NEAR(y[r * kOut + j], want, 1e-4)
                << DTypeName(dtype) << " rows=" << rows << " r=" << r << " j=" << j;
          }
        }
        EXPECT_EQ(y[rows * kOut], 1234.5f) << "wrote past the output";
      }
    }
  }
}

// Speculative decoding verifies k drafts as k + 1 rows of one step; with as
// few rows as one tile takes, each row's output is the very float a one-row
// (plain decode) step gives, so greedy decoding cannot tell them apart.
TEST_P(CpuLinearTest, RowsOfOneTileEqualOneRowStepsBitForBit) {
  auto backend = CreateCpuBackend(GetParam());
  std::mt19937 rng(5);
  constexpr int kOut = 36, kIn = 1100;  // Wider than a slice.
  Weight weight = MakeWeight(*backend, DType::kF32, kOut * kIn, rng);
  const Tensor tensor = Tensor::Of(*weight.buffer, {kOut, kIn});
  const int max_rows = SimdKernelsFor(BestSimdLevel()).tile4_max_rows;
  std::vector<float> x(max_rows * kIn);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<float> together(max_rows * kOut), alone(kOut);
  for (int rows = 2; rows <= max_rows; ++rows) {
    backend->Linear(x.data(), rows, tensor, nullptr, together.data(), DType::kF32);
    for (int r = 0; r < rows; ++r) {
      backend->Linear(x.data() + r * kIn, 1, tensor, nullptr, alone.data(), DType::kF32);
      for (int j = 0; j < kOut; ++j) {
        ASSERT_EQ(together[r * kOut + j], alone[j]) << "rows=" << rows << " r=" << r << " j=" << j;
      }
    }
  }
}

TEST_P(CpuLinearTest, EmbeddingAndRmsNormReadTypedWeights) {
  auto backend = CreateCpuBackend(GetParam());
  std::mt19937 rng(5);
  constexpr int kVocab = 11, kHidden = 29;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Weight table = MakeWeight(*backend, dtype, kVocab * kHidden, rng);
    const std::vector<int32_t> ids = {3, 0, 10, 3};
    FlatBatch batch;
    batch.input_ids = ids;
    batch.positions.assign(ids.size(), 0);
    batch.slot_mapping.assign(ids.size(), 0);
    const UploadedStepBatch step(backend.get(), batch);
    std::vector<float> embedded(ids.size() * kHidden);
    backend->Embedding(step.get(), Tensor::Of(*table.buffer, {kVocab, kHidden}), embedded.data());
    for (size_t t = 0; t < ids.size(); ++t) {
      for (int i = 0; i < kHidden; ++i) {
        ASSERT_EQ(embedded[t * kHidden + i], table.values[ids[t] * kHidden + i]);
      }
    }
    Weight norm = MakeWeight(*backend, dtype, kHidden, rng);
    std::vector<float> out(embedded.size());
    const int rows = static_cast<int>(ids.size());
    backend->RmsNorm(embedded.data(), Tensor::Of(*norm.buffer, {kHidden}), rows, 1e-5f, out.data());
    for (int r = 0; r < rows; ++r) {
      double squares = 0.0;
      for (int i = 0; i < kHidden; ++i) squares += std::pow(embedded[r * kHidden + i], 2);
      const double scale = 1.0 / std::sqrt(squares / kHidden + 1e-5);
      for (int i = 0; i < kHidden; ++i) {
        ASSERT_NEAR(out[r * kHidden + i], embedded[r * kHidden + i] * scale * norm.values[i], 1e-5);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuLinearTest, testing::Values(1, 3));

}  // namespace
}  // namespace pagoda::worker
