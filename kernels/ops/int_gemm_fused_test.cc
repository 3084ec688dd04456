// The fused int4 prefill GEMM (kernels/ops/int_linear.h LaunchFusedIntGemm,
// int_gemm_fused.cu: the weight dequantized in registers into mma.sync)
// against a float64 sum over the exactly dequantized weight. Its own binary
// (and gpu_check row, int_fused) because it is not on the serving path yet:
// a failure here must not hold back the int_linear row. Needs a CUDA
// device; skipped without one.

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "kernels/ops/gemm.h"
#include "kernels/ops/int_linear.h"
#include "kernels/ops/int_weight_pack.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/int_linear_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::DeviceBuffer;
using testing::DeviceIntWeight;
using testing::IntLinearCase;
using testing::RandomWeight;
using testing::RunIntLinearCase;

class FusedIntGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &gemm_),
              CUBLAS_STATUS_SUCCESS);
  }
  std::unique_ptr<GemmContext> gemm_;
};

// The fused int4 GEMM (dequantized in registers into mma.sync) over row
// counts across one to several row tiles, group sizes 32 to per channel, in
// not a multiple of 32 (a partial last vector), out not a multiple of its
// 64-output block, act-order and bias; what it refuses, it refuses.
TEST_F(FusedIntGemmTest, MatchesDequantizedWeight) {
  uint32_t seed = 500;
  for (ScalarType dtype : {ScalarType::kBF16, ScalarType::kF16}) {
    for (int64_t rows : {1, 9, 17, 33, 70}) {
      RunIntLinearCase({dtype, 4, rows, 37, 256, 128, false, true, true}, seed++, *gemm_);
      RunIntLinearCase({dtype, 4, rows, 72, 200, 32, false, false, true}, seed++, *gemm_);
      RunIntLinearCase({dtype, 4, rows, 130, 192, 64, true, true, true}, seed++, *gemm_);
      RunIntLinearCase({dtype, 4, rows, 16, 96, 96, false, false, true}, seed++, *gemm_);
    }
  }
  std::mt19937 rng(seed);
  const IntLinearCase odd_groups{ScalarType::kBF16, 4, 9, 8, 120, 40};
  std::string error;
  const HostPackedIntWeight packed =
      PackIntWeight(RandomWeight(odd_groups, rng).View(odd_groups), &error);
  ASSERT_EQ(error, "");
  const DeviceIntWeight device(packed);
  DeviceBuffer x(9 * 120 * 2), y(9 * 8 * 2);
  IntGemmParams p{.weight = device.View(odd_groups, packed), .x = x.get(), .y = y.get(), .rows = 9};
  EXPECT_EQ(LaunchFusedIntGemm(p, nullptr), cudaErrorInvalidValue);  // group 40
  p.weight.group_size = 32;
  p.weight.runs = 4;
  p.weight.bits = 8;
  EXPECT_EQ(LaunchFusedIntGemm(p, nullptr), cudaErrorInvalidValue);  // int8
}

}  // namespace
}  // namespace pagoda::kernels
