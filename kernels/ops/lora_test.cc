// The batched LoRA kernels (shrink + expand) against a float64 reference on
// the host: ranks 1, 8, 16 and 64 (and 512, the maximum), widths that are
// not multiples of 16, a strided (fused) output, rows of several adapters
// mixed with base-model rows, an adapter of rank 0, and a launch that
// covers only some of the groups.

#include "kernels/ops/lora.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::Decode;
using testing::DeviceBuffer;
using testing::Encode;
using testing::RandomFloats;
using testing::RoundTrip;
using testing::Tolerance;

std::unique_ptr<DeviceBuffer> ToDevice(ScalarType type, const std::vector<float>& values) {
  auto buffer = std::make_unique<DeviceBuffer>(values.size() * ScalarTypeSize(type));
  buffer->Upload(Encode(type, values));
  return buffer;
}

struct HostAdapter {
  int rank;
  float scale;
  std::vector<float> a;    // [rank, in]
  std::vector<float> b_t;  // [rank, out]
};

struct LoraCase {
  int tokens;
  int64_t in;
  int64_t out;
  int64_t y_stride;
  std::vector<int> ranks;  // One adapter (group) each.
};

// y0 + scale · B (A x) for every row whose group the launch covers.
std::vector<double> Reference(const LoraCase& c, const std::vector<float>& x,
                              const std::vector<float>& y0,
                              const std::vector<HostAdapter>& adapters,
                              const std::vector<int32_t>& row_group, int first, int count) {
  std::vector<double> y(y0.begin(), y0.end());
  for (int t = 0; t < c.tokens; ++t) {
    const int g = row_group[t];
    if (g < first || g >= first + count) continue;
    const HostAdapter& w = adapters[g];
    std::vector<double> v(w.rank, 0);
    for (int k = 0; k < w.rank; ++k) {
      for (int64_t i = 0; i < c.in; ++i) v[k] += double{w.a[k * c.in + i]} * x[t * c.in + i];
    }
    for (int64_t o = 0; o < c.out; ++o) {
      double sum = 0;
      for (int k = 0; k < w.rank; ++k) sum += double{w.b_t[k * c.out + o]} * v[k];
      y[t * c.y_stride + o] += double{w.scale} * sum;
    }
  }
  return y;
}

// Runs one launch over groups [first, first + count) and compares every
// element of y (untouched ones must keep their exact value).
void CheckLora(ScalarType type, const LoraCase& c, int first, int count, uint32_t seed) {
  const int num_groups = static_cast<int>(c.ranks.size());
  std::vector<HostAdapter> adapters;
  std::vector<std::unique_ptr<DeviceBuffer>> device_weights;
  LoraParams p;
  int max_rank = 1;
  for (int g = 0; g < num_groups; ++g) {
    const int rank = c.ranks[g];
    // Values scaled like trained adapters' so the update is comparable to y.
    HostAdapter w{rank, 0.5f + 0.25f * g,
                  RoundTrip(type, RandomFloats(rank * c.in, -0.2f, 0.2f, seed + 2 * g)),
                  RoundTrip(type, RandomFloats(rank * c.out, -0.2f, 0.2f, seed + 2 * g + 1))};
    if (g >= first && g < first + count) {
      device_weights.push_back(ToDevice(type, w.a.empty() ? std::vector<float>{0} : w.a));
      device_weights.push_back(ToDevice(type, w.b_t.empty() ? std::vector<float>{0} : w.b_t));
      p.groups[g - first] = LoraGroupWeights{device_weights[device_weights.size() - 2]->get(),
                                             device_weights.back()->get(), rank, w.scale};
    }
    max_rank = std::max(max_rank, rank);
    adapters.push_back(std::move(w));
  }
  // Rows cycle through the groups and the base model (-1).
  std::vector<int32_t> row_group(c.tokens);
  for (int t = 0; t < c.tokens; ++t) row_group[t] = (t * 7 + 3) % (num_groups + 1) - 1;
  const std::vector<float> x = RoundTrip(type, RandomFloats(c.tokens * c.in, -1, 1, seed + 99));
  const std::vector<float> y0 =
      RoundTrip(type, RandomFloats(c.tokens * c.y_stride, -1, 1, seed + 98));
  auto dx = ToDevice(type, x), dy = ToDevice(type, y0);
  DeviceBuffer groups(row_group.size() * sizeof(int32_t));
  groups.Upload(row_group);
  DeviceBuffer scratch(static_cast<size_t>(c.tokens) * max_rank * sizeof(float));
  p.x = dx->get();
  p.y = dy->get();
  p.in = c.in;
  p.out = c.out;
  p.y_stride = c.y_stride;
  p.num_tokens = c.tokens;
  p.row_group = static_cast<const int32_t*>(groups.get());
  p.first_group = first;
  p.num_groups = count;
  p.scratch = static_cast<float*>(scratch.get());
  p.scratch_stride = max_rank;
  p.dtype = type;
  PAGODA_ASSERT_CUDA_OK(LaunchLora(p, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got =
      Decode(type, dy->Download<uint8_t>(y0.size() * ScalarTypeSize(type)));
  const std::vector<double> want = Reference(c, x, y0, adapters, row_group, first, count);
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const bool touched = (static_cast<int64_t>(i) % c.y_stride) < c.out;
    const double tol = touched ? Tolerance(type) * (1.0 + std::abs(want[i])) : 0.0;
    if (!(std::abs(got[i] - want[i]) <= tol)) {
      ADD_FAILURE() << "element " << i << " (row " << i / c.y_stride << "): got " << got[i]
                    << " want " << want[i];
      ++failures;
    }
  }
}

class LoraKernelTest : public ::testing::TestWithParam<ScalarType> {};

TEST_P(LoraKernelTest, MixedAdaptersMatchFloat64OverOddShapes) {
  const std::vector<LoraCase> cases = {
      {5, 77, 45, 45, {1}},
      {13, 333, 1031, 1031 + 200, {8, 16, 64}},  // Fused output: 200 more columns.
      {9, 4099, 257, 257, {16, 0, 1, 64}},       // Rank 0: this projection untouched.
      {3, 129, 130, 300, {512}},
      {40, 64, 17, 17, {2, 3, 5, 7, 11, 13}},
  };
  uint32_t seed = 1;
  for (const LoraCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.tokens << " x " << c.in << " -> " << c.out << ", stride " << c.y_stride);
    CheckLora(GetParam(), c, 0, static_cast<int>(c.ranks.size()), seed += 10);
  }
}

TEST_P(LoraKernelTest, ALaunchLeavesOtherGroupsRowsAlone) {
  // 40 adapters: more than one launch takes; groups 32..39 in the second.
  LoraCase c{50, 96, 72, 80, std::vector<int>(40, 4)};
  CheckLora(GetParam(), c, 32, 8, 500);
  CheckLora(GetParam(), c, 0, kLoraGroupsPerLaunch, 600);
}

TEST(LoraKernelLaunchTest, RefusesBadParams) {
  LoraParams p;
  p.in = 8;
  p.out = 8;
  p.y_stride = 4;  // Below out.
  p.scratch_stride = 8;
  EXPECT_EQ(LaunchLora(p, nullptr), cudaErrorInvalidValue);
  p.y_stride = 8;
  p.num_groups = 1;
  p.groups[0].rank = 16;  // Above scratch_stride.
  EXPECT_EQ(LaunchLora(p, nullptr), cudaErrorInvalidValue);
  p.groups[0].rank = 0;
  EXPECT_EQ(LaunchLora(p, nullptr), cudaSuccess);  // No tokens: nothing to do.
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraKernelTest,
                         ::testing::Values(ScalarType::kF32, ScalarType::kF16, ScalarType::kBF16),
                         [](const auto& info) { return ScalarTypeName(info.param); });

}  // namespace
}  // namespace pagoda::kernels
