#include "worker/runner_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace pagoda::worker {
namespace {

using ::testing::ElementsAre;
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

// The injected hooks change the CPU runner of the rank they are given, and
// only the CPU runner: a refused device never reaches them.
TEST(RunnerFactoryTest, InjectedHooksAdjustTheCpuRunnersOptions) {
  std::vector<int> ranks_seen;
  std::string host_seen;
  RunnerHooks hooks;
  hooks.adjust_cpu_options = [&](int rank, CpuModelRunnerOptions* options) {
    ranks_seen.push_back(rank);
    host_seen = options->collective_host;
  };
  CpuModelRunnerOptions options;
  options.collective_host = "10.0.0.7";
  auto runner = MakeModelRunner("cpu", -1, options, hooks, /*rank=*/3);
  ASSERT_TRUE(runner.ok()) << runner.status();
  EXPECT_THAT(ranks_seen, ElementsAre(3));
  EXPECT_EQ(host_seen, "10.0.0.7");

  EXPECT_FALSE(MakeModelRunner("tpu", -1, options, hooks, 3).ok());
  EXPECT_THAT(ranks_seen, ElementsAre(3));
}

// Without hooks (pagoda-worker's case) the options are used as given.
TEST(RunnerFactoryTest, NoHooksIsTheDefault) {
  EXPECT_FALSE(RunnerHooks{}.adjust_cpu_options);
  EXPECT_TRUE(MakeModelRunner("cpu", -1, CpuModelRunnerOptions{}, RunnerHooks{}, 0).ok());
}

TEST(RunnerFactoryTest, UnknownDeviceIsInvalidArgument) {
  auto runner = MakeModelRunner("tpu", -1);
  EXPECT_EQ(runner.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(runner.status().message(), HasSubstr("'tpu'"));
}

}  // namespace
}  // namespace pagoda::worker
