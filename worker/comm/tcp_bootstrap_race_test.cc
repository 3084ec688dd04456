// The authenticated TCP mesh (tcp_mesh.h: every connection proves the group
// secret at both ends before it carries anything) against peers that are
// not ranks. Ranks are threads of this
// process, so the attacker (tests/support/listener_racer.h) can find exactly
// their listeners (the sockets in /proc/self/fd) and no other process's: the
// machine is shared.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/listener_racer.h"
#include "wire/rendezvous_store_server.h"
#include "wire/worker_secret.h"
#include "worker/comm/tcp_communicator.h"
#include "worker/comm/tcp_mesh.h"

namespace pagoda::worker::comm {
namespace {

using ::pagoda::testing::ListenerRacer;
using ::pagoda::wire::RendezvousStoreServer;
using Clock = std::chrono::steady_clock;

class TcpBootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // As pagoda-worker does: a write to a connection the racer closed is an
    // error on that connection, not the end of the process.
    signal(SIGPIPE, SIG_IGN);
    RendezvousStoreServer::Options options;
    options.secret = GenerateWorkerSecret().value();
    secret_ = options.secret;
    auto server = RendezvousStoreServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    store_ = *std::move(server);
  }

  TcpCollectiveOptions RankOptions(
      int rank, int world, const std::string& group,
      std::chrono::milliseconds timeout = std::chrono::milliseconds(500)) const {
    TcpCollectiveOptions options;
    options.rank = rank;
    options.world_size = world;
    options.rendezvous = {"127.0.0.1", store_->port(), secret_, group};
    options.timeout = timeout;
    options.group_secret = secret_;
    return options;
  }

  // Every rank joins (in its own thread, rank r `stagger` x r late) and, if
  // it joined, all-reduces rank-dependent values; returns each rank's status
  // and sums.
  struct RankResult {
    absl::Status status;
    std::vector<float> sum;
  };
  std::vector<RankResult> SetUpGroup(std::vector<TcpCollectiveOptions> ranks,
                                     std::chrono::milliseconds stagger = {}) {
    std::vector<RankResult> results(ranks.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r) {
      threads.emplace_back([&, r] {
        std::this_thread::sleep_for(stagger * r);
        auto comm = CreateTcpCommunicator(ranks[r]);
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

// The racer sees each rank's listener in /proc/net/tcp microseconds after
// listen() and sends it, in turn, zeros, the Gloo header that used to end a
// rank, and a forged hello (ListenerRacer::HostilePayloads). A listener
// drops each after its hello fails and goes on waiting for its ranks, so
// what must hold is stronger than "tries absorb the racer": no set-up fails
// at all, none is split, none has the racer inside or a different sum. The
// racer can miss every listener of quick set-ups, so set-ups go on, for up
// to kMaxRacing, until it has reached every kind of payload (a loaded
// machine once left it no connection in 400 set-ups, 10 s).
TEST_F(TcpBootstrapTest, RacerAtEveryListenerNeverJoinsNorFailsNorChangesASum) {
  constexpr int kMinSetUps = 50;
  constexpr auto kMaxRacing = std::chrono::seconds(90);
  constexpr int kWorld = 3;
  const int kinds = static_cast<int>(ListenerRacer::HostilePayloads().size());
  ListenerRacer racer([] { return std::vector<pid_t>{getpid()}; }, {store_->port()});
  int failed_set_ups = 0;
  int set_ups = 0;
  std::chrono::milliseconds slowest{0};
  const auto start = Clock::now();
  for (int i = 0;
       i < kMinSetUps || (racer.connections() < kinds && Clock::now() - start < kMaxRacing); ++i) {
    ++set_ups;
    std::vector<TcpCollectiveOptions> ranks;
    // A join timeout of 5 s (a server's default is 30 s).
    for (int r = 0; r < kWorld; ++r) {
      ranks.push_back(RankOptions(r, kWorld, absl::StrCat("g", i), std::chrono::seconds(5)));
    }
    const auto set_up_start = Clock::now();
    int joined = 0;
    // Ranks arrive 10 ms apart, as a restarted group's do (and a listener
    // waits for its late peers): the racer, which needs about a millisecond
    // to see a new listener, then reaches most set-ups.
    for (const RankResult& result : SetUpGroup(ranks, std::chrono::milliseconds(10))) {
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
  std::printf(
      "%d set-ups of %d ranks in %lld ms (slowest %lld ms); the racer connected %d "
      "times; %d set-ups failed\n",
      set_ups, kWorld, static_cast<long long>(took.count()),
      static_cast<long long>(slowest.count()), racer.connections(), failed_set_ups);
  EXPECT_EQ(failed_set_ups, 0);
  EXPECT_GE(racer.connections(), kinds) << "the racer did not reach a listener with every payload";
}

// Connections that never send their hello (more of them than a listener
// handshakes with at once) hold up no rank: the listener answers the ranks'
// connections beside them, and drops the oldest silent one when full.
TEST_F(TcpBootstrapTest, SilentConnectionsHoldUpNoRank) {
  constexpr int kWorld = 3;
  std::vector<TcpCollectiveOptions> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.push_back(RankOptions(r, kWorld, "silent", std::chrono::seconds(5)));
  }
  std::vector<RankResult> results;
  std::thread group([&] { results = SetUpGroup(ranks, std::chrono::milliseconds(300)); });
  absl::Cleanup join_group = [&group] { group.join(); };
  // Rank 0's listener, as its peers learn it.
  auto store = RendezvousStoreClient::Connect(ranks[0].rendezvous, std::chrono::seconds(5));
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::string> address = (*store)->Get("addr0");
  ASSERT_TRUE(address.ok()) << address.status();
  const int port = std::stoi(address->substr(address->rfind(':') + 1));
  std::vector<int> silent;
  for (int i = 0; i < kMaxPendingHandshakes + 6; ++i) {
    // Non-blocking: a connection the listener's queue has no room for yet
    // waits for its SYN's retry, not this loop.
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool started =
        connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0 || errno == EINPROGRESS;
    EXPECT_TRUE(started) << "connection " << i << ": " << std::strerror(errno);
    silent.push_back(fd);
  }
  const auto start = Clock::now();
  std::move(join_group).Invoke();
  for (const RankResult& result : results) {
    EXPECT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(result.sum, ExpectedSum(kWorld));
  }
  // Ranks 1 and 2 arrive 300 and 600 ms after rank 0; none waited for a
  // silent connection's 2 s.
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1500));
  for (int fd : silent) close(fd);
}

// Every message names its collective and size, checked before its payload
// is read: ranks that disagree on a collective's size fail it (DATA_LOSS)
// instead of reading each other's bytes into the wrong places, and stay
// failed.
TEST_F(TcpBootstrapTest, RanksOutOfStepFailTheCollectiveWithDataLoss) {
  std::vector<absl::Status> first(2), later(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = CreateTcpCommunicator(RankOptions(r, 2, "out-of-step", std::chrono::seconds(5)));
      first[r] = comm.status();
      if (!comm.ok()) return;
      std::vector<float> data(r == 0 ? 3 : 5, 1.0f);
      first[r] = (*comm)->AllReduceSum(data.data(), data.size(), DType::kF32);
      later[r] = (*comm)->AllReduceSum(data.data(), data.size(), DType::kF32);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(first[r].code(), absl::StatusCode::kDataLoss) << "rank " << r << ": " << first[r];
    EXPECT_TRUE(absl::StrContains(first[r].message(), "out of step")) << first[r];
    EXPECT_EQ(later[r].code(), absl::StatusCode::kDataLoss) << "rank " << r << ": " << later[r];
  }
}

// A rank that never comes ends the join of the others with DEADLINE_EXCEEDED
// at the timeout.
TEST_F(TcpBootstrapTest, AMissingRankEndsTheJoinWithinItsBound) {
  constexpr int kWorld = 3;
  std::vector<TcpCollectiveOptions> ranks;
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

// A rank with the wrong secret is refused by the listener it proves itself
// to (PERMISSION_DENIED), and no rank joins a group with it; the honest ranks
// then wait for a rank that never proves itself (DEADLINE_EXCEEDED).
TEST_F(TcpBootstrapTest, PeerWithTheWrongSecretIsRefusedAndThatSetUpAlone) {
  constexpr int kWorld = 3;
  std::vector<TcpCollectiveOptions> ranks;
  for (int r = 0; r < kWorld; ++r) ranks.push_back(RankOptions(r, kWorld, "impostor"));
  ranks[2].group_secret = std::string(secret_.size(), 'w');
  std::vector<RankResult> refused = SetUpGroup(ranks);
  int denied = 0;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_FALSE(refused[r].status.ok()) << "rank " << r << " joined a group with an impostor";
    if (absl::IsPermissionDenied(refused[r].status) &&
        absl::StrContains(refused[r].status.message(), "refused this rank's proof")) {
      ++denied;
    }
  }
  EXPECT_EQ(denied, 1) << refused[0].status << " / " << refused[1].status << " / "
                       << refused[2].status;
  EXPECT_TRUE(absl::IsPermissionDenied(refused[2].status)) << refused[2].status;

  // The next set-up, on the same store, with every rank honest.
  ranks.clear();
  for (int r = 0; r < kWorld; ++r) ranks.push_back(RankOptions(r, kWorld, "honest"));
  for (const RankResult& result : SetUpGroup(ranks)) {
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(result.sum, ExpectedSum(kWorld));
  }
}

TEST_F(TcpBootstrapTest, GroupWithoutAValidSecretIsRefusedBeforeConnecting) {
  TcpCollectiveOptions options = RankOptions(0, 2, "short");
  options.group_secret = "short";
  EXPECT_EQ(CreateTcpCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.group_secret.clear();
  EXPECT_EQ(CreateTcpCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda::worker::comm
