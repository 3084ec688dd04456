// Device faults end to end: pagoda-server spawns pagoda-worker-fault-injecting
// (tests/fakes/fault_injecting_backend.h), whose backend takes a sticky error
// once, at step k of one rank. The worker must report it as a fault (not as a
// bad request), the server must restart the group and resume every request
// by recomputation, and every stream must end with the tokens of an
// uninterrupted run.
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_client.h"

namespace pagoda::testing {
namespace {

using pagoda::v1::GenerateRequest;
using pagoda::v1::Generation;

constexpr int kStreams = 16;
constexpr int kMaxTokens = 40;
constexpr int kFaultStep = 12;

class FaultInjectionTest : public ::testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(
        (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_fault_", getpid()))
            .string());
    // Token-id prompts only: no tokenizer, so this test also runs under the
    // sanitizers (scripts/sanitizer_tests.sh).
    ASSERT_TRUE(MakeTinyModel(*model_dir_, /*seed=*/11, TinyTokenizer::kNone).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }
  void TearDown() override {
    unsetenv("PAGODA_TEST_FAULT_RANK");
    unsetenv("PAGODA_TEST_FAULT_STEP");
    unsetenv("PAGODA_TEST_FAULT_MARKER");
  }

  // A server over fault-injecting workers; rank `fault_rank` faults once at
  // kFaultStep (-1: never).
  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(int world_size,
                                                                    int fault_rank,
                                                                    const std::string& marker) {
    if (fault_rank >= 0) {
      setenv("PAGODA_TEST_FAULT_RANK", absl::StrCat(fault_rank).c_str(), 1);
      setenv("PAGODA_TEST_FAULT_STEP", absl::StrCat(kFaultStep).c_str(), 1);
      setenv("PAGODA_TEST_FAULT_MARKER", marker.c_str(), 1);
    }
    std::vector<std::string> args = {absl::StrCat("--model=", *model_dir_),
                                     absl::StrCat("--tensor-parallel-size=", world_size),
                                     absl::StrCat("--worker-binary=", PAGODA_FAULTY_WORKER_BINARY),
                                     "--max-model-len=128",
                                     "--block-size=4",
                                     "--num-gpu-blocks-override=800",
                                     "--cpu-threads=1",
                                     "--seed=5",
                                     "--port=0",
                                     "--metrics-port=-1"};
    auto server = ServerProcess::Start(PAGODA_SERVER_BINARY, args, absl::Seconds(60));
    unsetenv("PAGODA_TEST_FAULT_RANK");
    return server;
  }

  // Half greedy, half seeded; every request its own concurrent stream.
  static std::vector<StreamOutcome> RunAll(const ServerProcess& server) {
    auto stub = Generation::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    std::vector<StreamOutcome> outcomes(kStreams);
    std::vector<std::thread> threads;
    for (int i = 0; i < kStreams; ++i) {
      threads.emplace_back([&, i] {
        const GenerateRequest request = TokenRequest(
            TestPrompt(3 + i % 7, i), kMaxTokens, i % 2 == 0 ? 0 : 1000 + static_cast<uint64_t>(i));
        // A request that arrives while the workers restart is refused
        // before it is accepted (Engine::AddRequest); a client sends it
        // again, as any would. Accepted streams must survive the fault.
        const absl::Time deadline = absl::Now() + absl::Seconds(60);
        outcomes[i] = RunStream(*stub, request);
        while (absl::StrContains(outcomes[i].status.error_message(),
                                 "cannot serve requests now (restarting them)") &&
               absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(20));  // Polls for the restarted workers.
          outcomes[i] = RunStream(*stub, request);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    return outcomes;
  }

  static std::string* model_dir_;
};

std::string* FaultInjectionTest::model_dir_ = nullptr;

// GetParam(): the world size; the last rank faults.
TEST_P(FaultInjectionTest, DeviceFaultOnOneRankRestartsTheGroupWithTheSameTokens) {
  const int world_size = GetParam();
  const std::string marker = absl::StrCat(*model_dir_, "/fault_marker_", world_size);
  std::vector<StreamOutcome> expected;
  {
    auto server = StartServer(world_size, -1, marker);
    ASSERT_TRUE(server.ok()) << server.status();
    expected = RunAll(**server);
  }
  for (const StreamOutcome& outcome : expected) {
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
    ASSERT_EQ(outcome.tokens.size(), static_cast<size_t>(kMaxTokens));
  }

  auto server = StartServer(world_size, world_size - 1, marker);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::vector<StreamOutcome> outcomes = RunAll(**server);
  EXPECT_TRUE(std::filesystem::exists(marker)) << "the fault never fired";
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok())
        << "stream " << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(outcomes[i].tokens, expected[i].tokens) << "stream " << i;
  }
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total"), 1);
  EXPECT_GE(MetricValue((*server)->metrics_port(), "pagoda_requests_resumed_total"), 1);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, FaultInjectionTest, ::testing::Values(1, 2),
                         [](const auto& info) { return absl::StrCat("ranks", info.param); });

}  // namespace
}  // namespace pagoda::testing
