// Real processes over loopback: each rank is a pagoda_tcp_test_rank process
// that checks its own results (see tcp_test_rank_main.cc); this test starts
// the rendezvous store, spawns the ranks and checks how and when they ended.
#include "worker/comm/tcp_communicator.h"

#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "wire/rendezvous_store_server.h"
#include "worker/comm/rank_group_for_test.h"
#include "wire/limits.h"
#include "wire/worker_secret.h"

namespace pagoda::worker::comm {

using ::pagoda::wire::RendezvousStoreServer;
namespace {

// Spawns `world` ranks of `scenario` (rank timeout `timeout_ms`) and waits
// for all of them; a group still running after `limit` fails the test.
std::vector<RankOutcome> RunGroup(const std::string& scenario, int world, int timeout_ms,
                                  std::chrono::seconds limit, std::chrono::milliseconds* took) {
  auto run = RunRankGroup(
      world,
      [&](int rank, int port) {
        return std::vector<std::string>{PAGODA_TCP_TEST_RANK, scenario,
                                        std::to_string(rank),  std::to_string(world),
                                        std::to_string(port),  std::to_string(timeout_ms)};
      },
      limit);
  EXPECT_TRUE(run.ok()) << run.status();
  if (!run.ok()) return {};
  EXPECT_FALSE(run->timed_out) << scenario << ": ranks still running after " << limit.count()
                               << " s";
  *took = run->took;
  return run->ranks;
}

class TcpGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(TcpGroupTest, AllReduceAndAllGatherMatchPlainResults) {
  const int world = GetParam();
  std::chrono::milliseconds took;
  auto outcomes = RunGroup("collectives", world, 20000, std::chrono::seconds(60), &took);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(outcomes[rank].exited && outcomes[rank].exit_code == 0) << "rank " << rank;
  }
}

TEST_P(TcpGroupTest, KilledRankMakesOthersFailFast) {
  const int world = GetParam();
  std::chrono::milliseconds took;
  // Timeout 20 s: the survivors must notice the death long before it.
  auto outcomes = RunGroup("die", world, 20000, std::chrono::seconds(30), &took);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(world));
  EXPECT_EQ(outcomes[world - 1].signal, SIGKILL);
  for (int rank = 0; rank + 1 < world; ++rank) {
    EXPECT_TRUE(outcomes[rank].exited && outcomes[rank].exit_code == 0) << "rank " << rank;
  }
  EXPECT_LT(took, std::chrono::milliseconds(10000));
}

TEST_P(TcpGroupTest, SilentRankMakesOthersTimeOut) {
  const int world = GetParam();
  std::chrono::milliseconds took;
  auto outcomes = RunGroup("hang", world, 1000, std::chrono::seconds(30), &took);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(outcomes[rank].exited && outcomes[rank].exit_code == 0) << "rank " << rank;
  }
}

TEST_P(TcpGroupTest, AbortEndsPendingCollectiveEverywhere) {
  const int world = GetParam();
  std::chrono::milliseconds took;
  // Timeout 30 s: every rank must be done far sooner, by the abort alone.
  auto outcomes = RunGroup("abort", world, 30000, std::chrono::seconds(40), &took);
  ASSERT_EQ(outcomes.size(), static_cast<size_t>(world));
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(outcomes[rank].exited && outcomes[rank].exit_code == 0) << "rank " << rank;
  }
  EXPECT_LT(took, std::chrono::milliseconds(10000));
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, TcpGroupTest, ::testing::Values(2, 4));

TEST(TcpCommunicatorTest, RefusesBadRankAndWorld) {
  TcpCollectiveOptions options;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_EQ(CreateTcpCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.rank = 0;
  options.world_size = wire::kMaxWorldSize + 1;
  EXPECT_EQ(CreateTcpCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TcpCommunicatorTest, WorldOfOneNeedsNoPeersAndValidatesArguments) {
  RendezvousStoreServer::Options server_options;
  server_options.secret = GenerateWorkerSecret().value();
  auto server = RendezvousStoreServer::Start(server_options);
  ASSERT_TRUE(server.ok());
  TcpCollectiveOptions options;
  options.rendezvous = {"127.0.0.1", (*server)->port(), server_options.secret, "one"};
  options.timeout = std::chrono::milliseconds(5000);
  auto comm = CreateTcpCommunicator(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE((*comm)->AllReduceSum(data.data(), data.size(), DType::kF32).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  ASSERT_TRUE((*comm)->AllGather(data.data(), data.size(), DType::kF32).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ((*comm)->AllReduceSum(nullptr, 4, DType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->AllReduceSum(data.data(), kMaxCollectiveBytes, DType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  (*comm)->Abort();
  EXPECT_EQ((*comm)->AllReduceSum(data.data(), data.size(), DType::kF32).code(),
            absl::StatusCode::kAborted);
}

TEST(TcpCommunicatorTest, WrongSecretCannotJoin) {
  RendezvousStoreServer::Options server_options;
  server_options.secret = GenerateWorkerSecret().value();
  auto server = RendezvousStoreServer::Start(server_options);
  ASSERT_TRUE(server.ok());
  TcpCollectiveOptions options;
  options.world_size = 2;  // One rank needs no store, and so no secret for it.
  options.group_secret = std::string(32, 'x');
  options.rendezvous = {"127.0.0.1", (*server)->port(), std::string(32, 'x'), "one"};
  options.timeout = std::chrono::milliseconds(2000);
  EXPECT_EQ(CreateTcpCommunicator(options).status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace pagoda::worker::comm
