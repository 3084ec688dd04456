#include "worker/runner_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pagoda::worker {
namespace {

using ::testing::HasSubstr;

TEST(RunnerFactoryTest, CpuAlwaysExists) {
  auto runner = MakeModelRunner("cpu", -1);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_NE(*runner, nullptr);
  EXPECT_TRUE(MakeModelRunner("", -1).ok());
}

TEST(RunnerFactoryTest, CudaExistsExactlyWhenBuiltWithNvcc) {
  auto runner = MakeModelRunner("cuda", -1);
  if (BuiltWithCuda()) {
    ASSERT_TRUE(runner.ok()) << runner.status();
    EXPECT_NE(*runner, nullptr);
  } else {
    EXPECT_EQ(runner.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(runner.status().message(), HasSubstr("built without CUDA"));
  }
}

TEST(RunnerFactoryTest, UnknownDeviceIsInvalidArgument) {
  auto runner = MakeModelRunner("tpu", -1);
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(runner.status().message(), HasSubstr("'tpu'"));
}

}  // namespace
}  // namespace pagoda::worker
