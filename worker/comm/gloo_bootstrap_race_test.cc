// The authenticated Gloo bootstrap (CreateGlooCommunicator's proof of the
// group secret) against peers that are not ranks. Ranks are threads of this
// process, so the attacker (tests/support/listener_racer.h) can find exactly
// their listeners (the sockets in /proc/self/fd) and no other process's: the
// machine is shared.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "tests/support/listener_racer.h"
#include "wire/rendezvous_store_server.h"
#include "wire/worker_secret.h"
#include "worker/comm/gloo_communicator.h"

namespace pagoda::worker::comm {
namespace {

using ::pagoda::testing::ListenerRacer;
using ::pagoda::wire::RendezvousStoreServer;
using Clock = std::chrono::steady_clock;

// Counts the join tries that failed (CreateGlooCommunicator logs each one),
// over every rank.
class FailedTryCounter : public google::LogSink {
 public:
  FailedTryCounter() { google::AddLogSink(this); }
  ~FailedTryCounter() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override {
    if (absl::StrContains(absl::string_view(message, length), "Gloo join try")) count_++;
  }
  int count() const { return count_.load(); }

 private:
  std::atomic<int> count_{0};
};

class GlooBootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // As pagoda-worker does: a write to a connection the racer closed is an
    // error on that pair, not the end of the process.
    signal(SIGPIPE, SIG_IGN);
    RendezvousStoreServer::Options options;
    options.secret = GenerateWorkerSecret().value();
    secret_ = options.secret;
    auto server = RendezvousStoreServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    store_ = *std::move(server);
  }

  GlooOptions RankOptions(int rank, int world, const std::string& group,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(500)) const {
    GlooOptions options;
    options.rank = rank;
    options.world_size = world;
    options.rendezvous = {"127.0.0.1", store_->port(), secret_, group};
    options.timeout = timeout;
    options.group_secret = secret_;
    return options;
  }

  // Every rank joins (in its own thread) and, if it joined, all-reduces
  // rank-dependent values; returns each rank's status and sums.
  struct RankResult {
    absl::Status status;
    std::vector<float> sum;
  };
  std::vector<RankResult> SetUpGroup(std::vector<GlooOptions> ranks) {
    std::vector<RankResult> results(ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      threads.emplace_back([&, r] {
        auto comm = CreateGlooCommunicator(ranks[r]);
        results[r].status = comm.status();
        if (!comm.ok()) return;
        std::vector<float> data = {1.0f + r, 0.25f * r, -3.0f};
        results[r].status = (*comm)->AllReduceSum(data.data(), data.size(), DType::kF32);
        results[r].sum = data;
      });
    }
    for (std::thread& thread : threads) thread.join();
    return results;
  }

  static std::vector<float> ExpectedSum(int world) {
    std::vector<float> sum(3, 0.0f);
    for (int r = 0; r < world; ++r) {
      sum[0] += 1.0f + r;
      sum[1] += 0.25f * r;
      sum[2] += -3.0f;
    }
    return sum;
  }

  std::string secret_;
  std::unique_ptr<RendezvousStoreServer> store_;
};

// Gloo (Debian's 0.0~git20220518) gives each pair a listener that accepts
// exactly one connection and then closes, and this racer sees a listener in
// /proc/net/tcp microseconds after listen(). A try it wins fails (the
// connecting rank is refused, or a rank meets the racer and fails the proof,
// or a rank's pair is left unusable and the try runs to its deadline), every
// rank drops it at once and the next try starts with fresh listeners. What
// must hold: no set-up returns a group with the racer inside or different
// sums, none is split, and none fails: the tries absorb the racer. The
// racer can miss every listener of quick set-ups, so set-ups go on, up to
// kMaxSetUps, until it has reached one.
TEST_F(GlooBootstrapTest, RacerAtEveryListenerNeverJoinsNorChangesASum) {
  constexpr int kMinSetUps = 50;
  constexpr int kMaxSetUps = 200;
  constexpr int kWorld = 3;
  FailedTryCounter failed_tries;
  ListenerRacer racer([] { return std::vector<pid_t>{getpid()}; }, {store_->port()});
  int failed_set_ups = 0;
  int set_ups = 0;
  std::chrono::milliseconds slowest{0};
  const auto start = Clock::now();
  for (int i = 0; i < kMaxSetUps && (i < kMinSetUps || racer.connections() == 0); ++i) {
    ++set_ups;
    std::vector<GlooOptions> ranks;
    // A join timeout of 5 s (a server's default is 30 s): ample for the tries,
    // while each try has kFirstGlooTryTimeout as in production.
    for (int r = 0; r < kWorld; ++r) {
      ranks.push_back(RankOptions(r, kWorld, absl::StrCat("g", i), std::chrono::seconds(5)));
    }
    const auto set_up_start = Clock::now();
    int joined = 0;
    for (const RankResult& result : SetUpGroup(ranks)) {
      EXPECT_TRUE(result.status.ok()) << "set-up " << i << ": " << result.status;
      if (!result.status.ok()) continue;
      ++joined;
      EXPECT_EQ(result.sum, ExpectedSum(kWorld)) << "set-up " << i;
    }
    slowest = std::max(slowest, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    Clock::now() - set_up_start));
    failed_set_ups += joined < kWorld;
  }
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  std::printf("%d set-ups of %d ranks in %lld ms (slowest %lld ms); the racer connected %d "
              "times; %d rank tries failed; %d set-ups failed\n",
              set_ups, kWorld, static_cast<long long>(took.count()),
              static_cast<long long>(slowest.count()), racer.connections(),
              failed_tries.count(), failed_set_ups);
  EXPECT_EQ(failed_set_ups, 0);
  EXPECT_GT(racer.connections(), 0) << "the racer never reached a listener: the test tests nothing";
}

// A rank that never comes ends the join of the others with DEADLINE_EXCEEDED
// at the timeout: they wait for it before the first try opens a listener, so
// no try runs (the promise for any rank that is gone is (world + 2) x
// timeout).
TEST_F(GlooBootstrapTest, AMissingRankEndsTheJoinWithinItsBound) {
  constexpr int kWorld = 3;
  std::vector<GlooOptions> ranks;
  for (int r = 0; r + 1 < kWorld; ++r) {
    ranks.push_back(RankOptions(r, kWorld, "missing", std::chrono::milliseconds(800)));
  }
  const auto start = Clock::now();
  for (const RankResult& result : SetUpGroup(ranks)) {
    EXPECT_EQ(result.status.code(), absl::StatusCode::kDeadlineExceeded) << result.status;
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(800));
  EXPECT_LT(took, 2 * std::chrono::milliseconds(800));
}

TEST_F(GlooBootstrapTest, PeerWithTheWrongSecretFailsTheProofAndThatSetUpAlone) {
  constexpr int kWorld = 3;
  std::vector<GlooOptions> ranks;
  for (int r = 0; r < kWorld; ++r) ranks.push_back(RankOptions(r, kWorld, "impostor"));
  ranks[2].group_secret = std::string(secret_.size(), 'w');
  std::vector<RankResult> refused = SetUpGroup(ranks);
  int denied = 0;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_FALSE(refused[r].status.ok()) << "rank " << r << " joined a group with an impostor";
    if (absl::IsPermissionDenied(refused[r].status) &&
        absl::StrContains(refused[r].status.message(), "did not prove the group secret")) {
      ++denied;
    }
  }
  EXPECT_GE(denied, 1) << refused[0].status << " / " << refused[1].status;

  // The next set-up, on the same store, with every rank honest.
  ranks.clear();
  for (int r = 0; r < kWorld; ++r) ranks.push_back(RankOptions(r, kWorld, "honest"));
  for (const RankResult& result : SetUpGroup(ranks)) {
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(result.sum, ExpectedSum(kWorld));
  }
}

TEST_F(GlooBootstrapTest, GroupWithoutAValidSecretIsRefusedBeforeConnecting) {
  GlooOptions options = RankOptions(0, 2, "short");
  options.group_secret = "short";
  EXPECT_EQ(CreateGlooCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.group_secret.clear();
  EXPECT_EQ(CreateGlooCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::worker::comm
