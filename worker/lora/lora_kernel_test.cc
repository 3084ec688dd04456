// AddLoraUpdate at every SIMD level this CPU runs against a plain float64
// reference, over odd ranks, shapes, row counts and strides.
#include "worker/lora/lora_kernel.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

std::vector<float> RandomValues(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

class LoraKernelTest : public testing::TestWithParam<SimdLevel> {};

struct KernelCase {
  int rank;
  int64_t in;
  int64_t out;
  int rows;  // Rows of x; every other one (and the last) is updated.
};

// Rows listed out of order and some rows skipped, y rows of a wider stride:
// listed rows get scale · B (A x) to float64's value (within f32 rounding
// of the sums), every other element keeps its bits.
TEST_P(LoraKernelTest, MatchesFloat64OverOddShapes) {
  const SimdKernels& simd = SimdKernelsFor(GetParam());
  std::mt19937 rng(13);
  LoraScratch scratch;  // Shared by every case, as a thread's is.
  for (KernelCase c :
       {KernelCase{1, 1, 1, 1}, KernelCase{4, 7, 13, 5}, KernelCase{13, 65, 3, 7},
        KernelCase{16, 128, 129, 13}, KernelCase{17, 33, 95, 2}, KernelCase{64, 255, 31, 61},
        KernelCase{13, 512, 1376, 31}, KernelCase{4, 1376, 512, 9}, KernelCase{33, 17, 16, 50}}) {
    const float scale = 0.37f;
    const std::vector<float> a = RandomValues(c.rank * c.in, rng);
    const std::vector<float> b = RandomValues(c.out * c.rank, rng);
    const std::vector<float> a_panels = PackLoraA(a.data(), c.rank, c.in);
    const std::vector<float> b_t = TransposeLoraB(b.data(), c.rank, c.out);
    const LoraKernelWeights weights{a_panels.data(), b_t.data(), c.rank, c.in, c.out, scale};
    std::vector<int32_t> row_ids;
    for (int r = c.rows - 1; r >= 0; --r) {
      if (r % 2 == 0 || r == c.rows - 1) row_ids.push_back(r);
    }
    const int64_t stride = c.out + 5;
    const std::vector<float> x = RandomValues(c.rows * c.in, rng);
    const std::vector<float> y0 = RandomValues(c.rows * stride, rng);
    std::vector<float> y = y0;
    AddLoraUpdate(simd, weights, x.data(), row_ids.data(), static_cast<int>(row_ids.size()),
                  scratch, y.data(), stride);
    for (int r = 0; r < c.rows; ++r) {
      const bool listed = r % 2 == 0 || r == c.rows - 1;
      // Each rank's sum and the sum of its terms' magnitudes, which bounds
      // the f32 rounding.
      std::vector<double> ranks(c.rank, 0), rank_magnitudes(c.rank, 0);
      for (int k = 0; k < c.rank && listed; ++k) {
        for (int64_t i = 0; i < c.in; ++i) {
          const double term = double{a[k * c.in + i]} * x[r * c.in + i];
          ranks[k] += term;
          rank_magnitudes[k] += std::abs(term);
        }
      }
      for (int64_t o = 0; o < stride; ++o) {
        const float before = y0[r * stride + o];
        if (!listed || o >= c.out) {
          ASSERT_EQ(y[r * stride + o], before) << "row " << r << " column " << o;
          continue;
        }
        double delta = 0, magnitude = 0;
        for (int k = 0; k < c.rank; ++k) {
          delta += double{b[o * c.rank + k]} * ranks[k];
          magnitude += std::abs(double{b[o * c.rank + k]}) * rank_magnitudes[k];
        }
        const double expected = before + scale * delta;
        ASSERT_NEAR(y[r * stride + o], expected, 1e-6 * (1 + scale * magnitude))
            << SimdLevelName(GetParam()) << " rank " << c.rank << " in " << c.in << " out " << c.out
            << " row " << r << " column " << o;
      }
    }
  }
}

// More rows of one adapter than one call takes (kLoraRowsPerCall): every
// call's rows, the last call's short block included, get their update.
TEST_P(LoraKernelTest, RowsPastOneCallAllGetTheirUpdate) {
  const SimdKernels& simd = SimdKernelsFor(GetParam());
  std::mt19937 rng(17);
  const int rank = 5, rows = 2 * kLoraRowsPerCall + 3;
  const int64_t in = 9, out = 21;
  const std::vector<float> a = RandomValues(rank * in, rng);
  const std::vector<float> b = RandomValues(out * rank, rng);
  const std::vector<float> a_panels = PackLoraA(a.data(), rank, in);
  const std::vector<float> b_t = TransposeLoraB(b.data(), rank, out);
  std::vector<int32_t> row_ids(rows);
  for (int r = 0; r < rows; ++r) row_ids[r] = r;
  const std::vector<float> x = RandomValues(rows * in, rng);
  std::vector<float> y(rows * out, 0.0f);
  LoraScratch scratch;
  AddLoraUpdate(simd, {a_panels.data(), b_t.data(), rank, in, out, 1.0f}, x.data(), row_ids.data(),
                rows, scratch, y.data(), out);
  for (int r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double expected = 0;
      for (int k = 0; k < rank; ++k) {
        double t = 0;
        for (int64_t i = 0; i < in; ++i) t += double{a[k * in + i]} * x[r * in + i];
        expected += double{b[o * rank + k]} * t;
      }
      ASSERT_NEAR(y[r * out + o], expected, 1e-4) << "row " << r << " column " << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, LoraKernelTest, testing::ValuesIn(SupportedSimdLevels()),
                         [](const testing::TestParamInfo<SimdLevel>& info) {
                           return std::string(SimdLevelName(info.param));
                         });

}  // namespace
}  // namespace pagoda::worker
