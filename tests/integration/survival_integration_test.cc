// Worker supervision end to end: real pagoda-server + pagoda-worker processes;
// the worker is SIGKILLed under load and the server must restart it and
// resume every accepted request by recomputation, so that each stream ends
// with exactly the tokens of an uninterrupted run.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

constexpr int kStreams = 64;
constexpr int kMaxTokens = 60;

class SurvivalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(
        (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_survival_", getpid()))
            .string());
    ASSERT_TRUE(MakeTinyModel(*model_dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
      const std::string& model_dir, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {absl::StrCat("--model=", model_dir),
                                     "--max-model-len=128",
                                     "--block-size=4",
                                     "--num-gpu-blocks-override=800",
                                     "--seed=5",
                                     "--port=0",
                                     "--metrics-port=-1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return ServerProcess::Start(PAGODA_SERVER_BINARY, args, absl::Seconds(60));
  }

  // Half greedy, half seeded sampling; prompts of different lengths.
  static std::vector<GenerateRequest> Requests() {
    std::vector<GenerateRequest> requests;
    for (int i = 0; i < kStreams; ++i) {
      requests.push_back(TokenRequest(TestPrompt(3 + i % 13, i), kMaxTokens,
                                      i % 2 == 0 ? 0 : 1000 + static_cast<uint64_t>(i)));
    }
    return requests;
  }

  // Runs every request as its own concurrent stream.
  static std::vector<StreamOutcome> RunAll(Generation::Stub& stub,
                                           const std::vector<GenerateRequest>& requests,
                                           std::atomic<int>* received) {
    std::vector<StreamOutcome> outcomes(requests.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back([&, i] { outcomes[i] = RunStream(stub, requests[i], received); });
    }
    for (std::thread& thread : threads) thread.join();
    return outcomes;
  }

  // The server's worker process once it is not `old` (a restarted one).
  static pid_t WaitForNewWorker(pid_t server, pid_t old, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      for (pid_t child : ChildPids(server)) {
        if (child != old) return child;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return -1;
  }

  static std::string* model_dir_;
};

std::string* SurvivalTest::model_dir_ = nullptr;

TEST_F(SurvivalTest, KilledWorkersUnder64StreamsResumeWithTheSameTokens) {
  auto server = StartServer(*model_dir_);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Generation::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const std::vector<GenerateRequest> requests = Requests();

  // Uninterrupted run: the expected tokens.
  const std::vector<StreamOutcome> expected = RunAll(*stub, requests, nullptr);
  for (const StreamOutcome& outcome : expected) {
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
    ASSERT_EQ(outcome.tokens.size(), static_cast<size_t>(kMaxTokens));
  }

  // The same streams again; the worker is killed three times along the way,
  // each time once the restarted worker has made progress.
  std::atomic<int> received{0};
  std::vector<StreamOutcome> outcomes;
  const int port = (*server)->metrics_port();
  const double finished_before = MetricValue(port, "pagoda_request_success_total");
  // Every stream accepted before the first kill (AcceptedRequests).
  auto all_accepted = [&] { return AcceptedRequests(port, finished_before) >= kStreams; };
  std::thread clients([&] { outcomes = RunAll(*stub, requests, &received); });
  pid_t worker = (*server)->worker_pids().at(0);
  int kills = 0;
  // Every stream accepted before the first kill, then each kill as soon as
  // its token count is reached: a check of the counter alone, since on a
  // fast machine most streams run to their end within a metrics scrape.
  ASSERT_TRUE(WaitFor(all_accepted, absl::Seconds(60)));
  for (int threshold : {kStreams * 3, kStreams * 15, kStreams * 30}) {
    ASSERT_TRUE(WaitFor([&] { return received.load() >= threshold; }, absl::Seconds(60)));
    ASSERT_LT(received.load(), kStreams * kMaxTokens) << "streams ended before the kill";
    const int at_kill = received.load();
    ASSERT_EQ(kill(worker, SIGKILL), 0);
    ++kills;
    worker = WaitForNewWorker((*server)->pid(), worker, absl::Seconds(10));
    ASSERT_GT(worker, 0) << "no worker was restarted";
    // The restart counted, and tokens from the new worker, before the next
    // kill: a kill during the restart attempt would fail that attempt rather
    // than end a restarted worker (tokens alone are not enough on a loaded
    // machine: the old worker's last step may still arrive after the kill).
    ASSERT_TRUE(WaitFor(
        [&] {
          return MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total") >= kills;
        },
        absl::Seconds(60)));
    ASSERT_TRUE(WaitFor([&] { return received.load() > at_kill + kStreams; }, absl::Seconds(60)));
  }
  clients.join();
  ASSERT_EQ(kills, 3);
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok())
        << "stream " << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(outcomes[i].tokens, expected[i].tokens) << "stream " << i;
  }
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total"), 3);
  EXPECT_GE(MetricValue((*server)->metrics_port(), "pagoda_requests_resumed_total"), kStreams);
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_recovery_seconds_count"), 3);
  // Health follows the group on the frontend's next poll (every 100 ms), and
  // the fast CPU worker can finish every stream within that after the last
  // recovery.
  EXPECT_TRUE(WaitFor([&] { return HealthStatus((*server)->address()) == 1; }, absl::Seconds(5)));
}

TEST_F(SurvivalTest, IdleServerSeesAKilledWorkerWithinASecondAndRecovers) {
  auto server = StartServer(*model_dir_);
  ASSERT_TRUE(server.ok()) << server.status();
  const pid_t worker = (*server)->worker_pids().at(0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  // Restarting means the death was seen: a new worker within a second.
  const pid_t restarted = WaitForNewWorker((*server)->pid(), worker, absl::Seconds(5));
  ASSERT_GT(restarted, 0);
  EXPECT_LT(absl::Now() - killed, absl::Seconds(1));
  ASSERT_TRUE(WaitFor([&] { return HealthStatus((*server)->address()) == 1; }, absl::Seconds(10)));
  auto stub = Generation::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const StreamOutcome outcome = RunStream(*stub, TokenRequest(TestPrompt(5, 1), 4));
  EXPECT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(outcome.tokens.size(), 4u);
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total"), 1);
}

// --worker-stall-timeout: a worker stopped (SIGSTOP: alive, its connection
// open, silent) for less than the timeout is kept, as on a busy host; one
// stopped past it is declared lost and restarted.
TEST_F(SurvivalTest, StalledWorkerIsKeptUnderTheStallTimeoutAndRestartedPastIt) {
  auto server = StartServer(*model_dir_, {"--worker-stall-timeout=4"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Generation::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const pid_t worker = (*server)->worker_pids().at(0);
  ASSERT_EQ(kill(worker, SIGSTOP), 0);
  absl::Cleanup resume = [worker] { kill(worker, SIGCONT); };
  absl::SleepFor(absl::Seconds(2));
  ASSERT_EQ(kill(worker, SIGCONT), 0);
  // Served once the worker runs again, and nothing was restarted.
  EXPECT_TRUE(RunStream(*stub, TokenRequest(TestPrompt(5, 2), 4)).status.ok());
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total"), 0);

  ASSERT_EQ(kill(worker, SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  const pid_t restarted = WaitForNewWorker((*server)->pid(), worker, absl::Seconds(15));
  ASSERT_GT(restarted, 0);
  EXPECT_GE(absl::Now() - stopped, absl::Seconds(3)) << "restarted before the stall timeout";
  ASSERT_TRUE(WaitFor([&] { return HealthStatus((*server)->address()) == 1; }, absl::Seconds(10)));
  const StreamOutcome outcome = RunStream(*stub, TokenRequest(TestPrompt(5, 1), 4));
  EXPECT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total"), 1);
}

TEST_F(SurvivalTest, WorkerThatCannotStartEndsRequestsUnavailableAfterBoundedRetries) {
  // A model of its own, removed under the running server.
  const std::string model_dir = *model_dir_ + "_doomed";
  std::filesystem::copy(*model_dir_, model_dir, std::filesystem::copy_options::recursive);
  auto server = StartServer(model_dir, {"--worker-restart-limit=3"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Generation::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  // The running worker holds its weights in memory; only a restart needs
  // the files. Removed before the request, so that the kill follows its
  // first token at once: the tiny model makes a token in about 0.1 ms.
  std::filesystem::remove_all(model_dir);
  std::atomic<int> received{0};
  StreamOutcome outcome;
  std::thread client(
      [&] { outcome = RunStream(*stub, TokenRequest(TestPrompt(5, 2), 120), &received); });
  ASSERT_TRUE(WaitFor([&] { return received.load() > 0; }, absl::Seconds(30)));
  ASSERT_EQ(kill((*server)->worker_pids().at(0), SIGKILL), 0);
  const absl::Time killed = absl::Now();
  client.join();
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << outcome.status.error_message();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(20));
  EXPECT_EQ(HealthStatus((*server)->address()), 2);  // NOT_SERVING.
  grpc::ClientContext context;
  pagoda::v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&context, pagoda::v1::GetModelInfoRequest(), &info).ok());
  EXPECT_FALSE(info.workers_healthy());
  EXPECT_TRUE(absl::StrContains(info.workers_status(), "giving up")) << info.workers_status();
  // New requests are refused with the same reason.
  const StreamOutcome refused = RunStream(*stub, TokenRequest(TestPrompt(3, 3), 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(absl::StrContains(refused.status.error_message(), "giving up"))
      << refused.status.error_message();
}

// A secret file for connected workers, readable by its owner only.
std::string WriteWorkerSecretFile(const std::string& dir) {
  const std::string secret_file = dir + "/worker_secret";
  std::ofstream(secret_file) << "connected-worker-secret-0123456789\n";
  std::filesystem::permissions(secret_file,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return secret_file;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> StartConnectedWorker(const std::string& listen,
                                                                    const std::string& secret_file) {
  return ServerProcess::Start(
      PAGODA_WORKER_BINARY,
      {absl::StrCat("--listen=", listen), absl::StrCat("--secret-file=", secret_file)},
      absl::Seconds(30), "PAGODA_WORKER_LISTENING");
}

TEST_F(SurvivalTest, ConnectedWorkerIsReconnectedWhenItComesBack) {
  const std::string secret_file = WriteWorkerSecretFile(*model_dir_);
  auto start_worker = [&](const std::string& listen) {
    return StartConnectedWorker(listen, secret_file);
  };
  auto worker = start_worker("127.0.0.1:0");
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string worker_address = (*worker)->address();
  auto server = StartServer(*model_dir_, {absl::StrCat("--worker-addresses=", worker_address),
                                          absl::StrCat("--worker-secret-file=", secret_file)});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Generation::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const GenerateRequest request = TokenRequest(TestPrompt(7, 5), kMaxTokens, 77);
  const StreamOutcome expected = RunStream(*stub, request);
  ASSERT_TRUE(expected.status.ok()) << expected.status.error_message();

  std::atomic<int> received{0};
  StreamOutcome outcome;
  std::thread client([&] { outcome = RunStream(*stub, request, &received); });
  ASSERT_TRUE(WaitFor([&] { return received.load() >= 5; }, absl::Seconds(30)));
  (*worker)->Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  ASSERT_TRUE((*worker)->WaitForExit(absl::Seconds(5)).has_value());
  // The server sees the loss within a second, idle or not.
  ASSERT_TRUE(WaitFor([&] { return HealthStatus((*server)->address()) == 2; }, absl::Seconds(1)));
  EXPECT_LT(absl::Now() - killed, absl::Seconds(1));
  // "Kubernetes restarts the pod": a new worker on the same address.
  auto restarted = start_worker(worker_address);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  client.join();
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(outcome.tokens, expected.tokens);
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total"), 1);
}

// One owner per worker: a second server pointed at a connected worker that
// already serves one is refused at start-up (exit 1, saying why), and the
// first server's outputs are unchanged.
TEST_F(SurvivalTest, ASecondServerOnAnOwnedWorkerIsRefusedAndChangesNothing) {
  const std::string secret_file = WriteWorkerSecretFile(*model_dir_);
  auto worker = StartConnectedWorker("127.0.0.1:0", secret_file);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::vector<std::string> connect = {
      absl::StrCat("--worker-addresses=", (*worker)->address()),
      absl::StrCat("--worker-secret-file=", secret_file)};
  auto server = StartServer(*model_dir_, connect);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Generation::NewStub(
      grpc::CreateChannel((*server)->address(), grpc::InsecureChannelCredentials()));
  const GenerateRequest request = TokenRequest(TestPrompt(7, 5), kMaxTokens, 0);
  const StreamOutcome before = RunStream(*stub, request);
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();

  const std::string log = *model_dir_ + "/second_server.log";
  const absl::StatusOr<std::string> second = RunCommand(absl::StrCat(
      PAGODA_SERVER_BINARY, " --model=", *model_dir_, " --max-model-len=128 --block-size=4",
      " --port=0 --metrics-port=-1 ", connect[0], " ", connect[1], " > ", log,
      " 2>&1; echo exit=$?"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, "exit=1\n");
  std::ifstream log_file(log);
  const std::string output((std::istreambuf_iterator<char>(log_file)),
                           std::istreambuf_iterator<char>());
  EXPECT_TRUE(absl::StrContains(output, "this worker serves another server")) << output;

  const StreamOutcome after = RunStream(*stub, request);
  ASSERT_TRUE(after.status.ok()) << after.status.error_message();
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total"), 0);
}

}  // namespace
}  // namespace pagoda::testing
