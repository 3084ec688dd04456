// The worker's side of joining a tensor-parallel group: every hostile
// LoadModel field refused by name, the single-rank and timed communicators,
// and a failed (aborted) collective ending a step with its status instead of
// a crash or a hang.

#include "worker/tensor_parallel_group.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"
#include "wire/limits.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::LoadModelRequest;

LoadModelRequest GroupRequest(int rank, int world) {
  LoadModelRequest request;
  request.set_rank(rank);
  request.set_world_size(world);
  request.set_rendezvous_address("127.0.0.1:4567");
  request.set_rendezvous_secret("0123456789abcdef0123456789abcdef");
  request.set_rendezvous_prefix("group1");
  return request;
}

void ExpectInvalid(const LoadModelRequest& request, const std::string& names) {
  auto membership = ParseGroupMembership(request);
  ASSERT_FALSE(membership.ok()) << names;
  EXPECT_EQ(membership.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(membership.status().message(), names)) << membership.status();
}

TEST(ParseGroupMembershipTest, AcceptsAGroupAndTheSingleRankDefaults) {
  auto membership = ParseGroupMembership(GroupRequest(2, 4));
  ASSERT_TRUE(membership.ok()) << membership.status();
  EXPECT_EQ(membership->rank, 2);
  EXPECT_EQ(membership->world_size, 4);
  EXPECT_EQ(membership->rendezvous.host, "127.0.0.1");
  EXPECT_EQ(membership->rendezvous.port, 4567);
  EXPECT_EQ(membership->rendezvous.prefix, "group1");
  EXPECT_EQ(membership->timeout, kDefaultCollectiveTimeout);

  LoadModelRequest single;  // world_size 0 means one rank; no rendezvous needed.
  membership = ParseGroupMembership(single);
  ASSERT_TRUE(membership.ok()) << membership.status();
  EXPECT_EQ(membership->world_size, 1);

  LoadModelRequest timed = GroupRequest(0, 2);
  timed.set_collective_timeout_ms(1500);
  membership = ParseGroupMembership(timed);
  ASSERT_TRUE(membership.ok()) << membership.status();
  EXPECT_EQ(membership->timeout.count(), 1500);
}

TEST(ParseGroupMembershipTest, RefusesHostileFieldsByName) {
  ExpectInvalid(GroupRequest(0, -1), "world_size");
  ExpectInvalid(GroupRequest(0, wire::kMaxWorldSize + 1), "world_size");
  ExpectInvalid(GroupRequest(4, 4), "rank 4");
  ExpectInvalid(GroupRequest(-1, 2), "rank -1");
  LoadModelRequest request = GroupRequest(0, 2);
  request.set_collective_timeout_ms(-5);
  ExpectInvalid(request, "collective_timeout_ms");
  request.set_collective_timeout_ms(kMaxCollectiveTimeout.count() + 1);
  ExpectInvalid(request, "collective_timeout_ms");
  for (const std::string address :
       {"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", ":5000", "127.0.0.1:port"}) {
    request = GroupRequest(0, 2);
    request.set_rendezvous_address(address);
    ExpectInvalid(request, "rendezvous_address");
  }
  request = GroupRequest(1, 2);
  request.clear_rendezvous_secret();
  ExpectInvalid(request, "rendezvous_secret");
  request = GroupRequest(1, 2);
  request.clear_rendezvous_prefix();
  ExpectInvalid(request, "rendezvous_prefix");
}

TEST(TcpTransportTest, AnUnreachableStoreFailsInsteadOfWaiting) {
  LoadModelRequest request = GroupRequest(0, 2);
  request.set_rendezvous_address("127.0.0.1:1");  // Nothing listens on port 1.
  request.set_collective_timeout_ms(2000);
  auto membership = ParseGroupMembership(request);
  ASSERT_TRUE(membership.ok()) << membership.status();
  auto communicator = TcpTransport("127.0.0.1")(*membership);
  ASSERT_FALSE(communicator.ok());
  EXPECT_TRUE(communicator.status().code() == absl::StatusCode::kUnavailable ||
              communicator.status().code() == absl::StatusCode::kDeadlineExceeded)
      << communicator.status();
}

TEST(SingleRankCommunicatorTest, LeavesDataAloneChecksArgumentsAndHonoursAbort) {
  auto communicator = CreateSingleRankCommunicator();
  std::vector<float> data = {1.5f, -2.0f};
  ASSERT_TRUE(communicator->AllReduceSum(data.data(), data.size(), DType::kF32).ok());
  EXPECT_EQ(data, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(communicator->AllReduceSum(nullptr, 3, DType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  communicator->Abort();
  EXPECT_EQ(communicator->AllReduceSum(data.data(), data.size(), DType::kF32).code(),
            absl::StatusCode::kAborted);
  EXPECT_EQ(communicator->AllGather(data.data(), data.size(), DType::kF32).code(),
            absl::StatusCode::kAborted);
}

TEST(TimedCommunicatorTest, ForwardsAndAddsUpTime) {
  auto inner = CreateSingleRankCommunicator();
  TimedCommunicator timed(inner.get());
  std::vector<float> data(1 << 16, 1.0f);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(timed.AllReduceSum(data.data(), data.size(), DType::kF32).ok());
  }
  const double seconds = timed.TakeSeconds();
  EXPECT_GT(seconds, 0.0);
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(timed.TakeSeconds(), 0.0);  // Taken: the sum starts again.
  timed.Abort();                        // Reaches the inner communicator.
  EXPECT_EQ(timed.AllReduceSum(data.data(), 1, DType::kF32).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(timed.rank(), 0);
  EXPECT_EQ(timed.world_size(), 1);
}

std::string Env(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

// A tiny random model (4 heads, 2 KV heads) in a fresh directory.
std::string MakeTinyModel() {
  char pattern[] = "/tmp/pagoda_tp_group_XXXXXX";
  EXPECT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  const std::string command =
      absl::StrCat(Env("PAGODA_PYTHON3", "/usr/bin/python3"), " ", Env("PAGODA_SOURCE_DIR", "."),
                   "/scripts/make_tiny_model.py --out ", dir, " --vocab-size 40 --hidden-size 32",
                   " --intermediate-size 48 --num-layers 1 --num-heads 4 --num-kv-heads 2",
                   " --max-position-embeddings 64 > /dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

// The path both runners take: one rank needs no transport; a model that does
// not split is refused before the transport runs; otherwise the transport
// joins with the parsed membership and its failure comes back as it is.
TEST(JoinGroupTest, ChecksTheSplitBeforeTheTransportAndSkipsItForOneRank) {
  const std::string dir = MakeTinyModel();
  std::vector<GroupMembership> joined;
  const GroupTransport transport =
      [&](const GroupMembership& membership) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    joined.push_back(membership);
    return absl::UnavailableError("transport down");
  };
  auto single = JoinGroup(GroupMembership{}, dir, transport);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ((*single)->world_size(), 1);
  EXPECT_TRUE(joined.empty());

  auto three = ParseGroupMembership(GroupRequest(1, 3));
  ASSERT_TRUE(three.ok()) << three.status();
  auto refused = JoinGroup(*three, dir, transport);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_TRUE(joined.empty());

  auto two = ParseGroupMembership(GroupRequest(1, 2));
  ASSERT_TRUE(two.ok()) << two.status();
  auto failed = JoinGroup(*two, dir, transport);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0].rank, 1);
  EXPECT_EQ(joined[0].world_size, 2);
  EXPECT_EQ(joined[0].rendezvous.prefix, "group1");
  EXPECT_EQ(JoinGroup(*two, dir + "/missing", transport).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

// The runner end to end: a collective that fails mid-forward fails the step
// with its status, and every later step too.
TEST(CpuModelRunnerGroupTest, AbortedCollectiveFailsTheStepWithAborted) {
  const std::string dir = MakeTinyModel();
  auto runner = CreateCpuModelRunner();
  LoadModelRequest load;
  load.set_model_dir(dir);
  load.set_block_size(4);
  load.set_kv_cache_memory_bytes(1 << 20);
  // Heads that do not split over 3 ranks: refused before joining a group.
  LoadModelRequest bad = load;
  bad.MergeFrom(GroupRequest(0, 3));
  auto refused = runner->LoadModel(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "num_attention_heads (4)"))
      << refused.status();

  ASSERT_TRUE(runner->LoadModel(load).ok());
  v1::InitCacheRequest init;
  init.set_num_gpu_blocks(4);
  ASSERT_TRUE(runner->InitCache(init).ok());
  v1::StepPlan plan;
  v1::SequenceStep* seq = plan.add_sequences();
  seq->set_seq_id(1);
  for (int t : {3, 9, 4}) seq->add_token_ids(t);
  seq->add_block_table(0);
  seq->set_do_sample(true);
  auto result = runner->ExecuteStep(plan);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens_size(), 1);
  EXPECT_EQ(result->all_reduce_seconds() > 0, true);  // Even one rank goes through the seam.

  runner->Abort();
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto failed = runner->ExecuteStep(plan);
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kAborted) << failed.status();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::worker
