// Tensor parallelism end to end: real pagoda-server processes that spawn 1, 2
// or 4 pagoda-worker ranks (TCP collectives over loopback, rendezvous through the
// server's store). The same greedy requests give the same tokens and
// logprobs at every size; a model whose heads do not split is refused at
// start-up in one line; a killed rank ends the requests in flight with
// UNAVAILABLE within seconds (restarts off) or, with restarts on, the whole
// group is restarted and the requests resume with the same tokens.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_client.h"
#include "tests/support/listener_racer.h"

namespace pagoda::testing {
namespace {

using pagoda::v1::GenerateRequest;
using pagoda::v1::GenerateResponse;
using pagoda::v1::Generation;

class TensorParallelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // 4 query heads on 2 KV heads: at 4 ranks each KV head is copied.
    model_dir_ = new std::string(
        (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_tp_", getpid())).string());
    ASSERT_TRUE(MakeTinyModel(*model_dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
      int tensor_parallel_size, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {absl::StrCat("--model=", *model_dir_),
                                     absl::StrCat("--tensor-parallel-size=", tensor_parallel_size),
                                     "--max-model-len=512",
                                     "--block-size=4",
                                     "--num-gpu-blocks-override=600",
                                     "--cpu-threads=1",
                                     "--port=0",
                                     "--metrics-port=-1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return ServerProcess::Start(PAGODA_SERVER_BINARY, args, absl::Seconds(60));
  }

  static std::unique_ptr<Generation::Stub> Stub(const ServerProcess& server) {
    return Generation::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  }

  // Greedy, with the top 5 logprobs of every token.
  static std::vector<GenerateResponse> RunGreedy(Generation::Stub& stub) {
    std::vector<GenerateResponse> responses;
    for (int i = 0; i < 4; ++i) {
      GenerateRequest request = TokenRequest(TestPrompt(3 + 7 * i, i), 24);
      request.set_logprobs(5);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      GenerateResponse response;
      const grpc::Status status = stub.Generate(&context, request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      responses.push_back(response);
    }
    return responses;
  }

  static std::string* model_dir_;
};

std::string* TensorParallelTest::model_dir_ = nullptr;

TEST_F(TensorParallelTest, SizesTwoAndFourGiveTheTokensAndLogprobsOfOne) {
  std::vector<GenerateResponse> expected;
  {
    auto server = StartServer(1);
    ASSERT_TRUE(server.ok()) << server.status();
    expected = RunGreedy(*Stub(**server));
  }
  for (int size : {2, 4}) {
    auto server = StartServer(size);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_EQ((*server)->worker_pids().size(), static_cast<size_t>(size));
    auto stub = Stub(**server);
    grpc::ClientContext context;
    pagoda::v1::ModelInfo info;
    ASSERT_TRUE(stub->GetModelInfo(&context, pagoda::v1::GetModelInfoRequest(), &info).ok());
    EXPECT_EQ(info.tensor_parallel_size(), size);
    const std::vector<GenerateResponse> actual = RunGreedy(*stub);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t r = 0; r < expected.size(); ++r) {
      ASSERT_EQ(actual[r].outputs_size(), 1);
      const auto& want = expected[r].outputs(0);
      const auto& got = actual[r].outputs(0);
      EXPECT_EQ(std::vector<int32_t>(got.token_ids().begin(), got.token_ids().end()),
                std::vector<int32_t>(want.token_ids().begin(), want.token_ids().end()))
          << "request " << r << " at size " << size;
      ASSERT_EQ(got.logprobs_size(), want.logprobs_size());
      for (int t = 0; t < want.logprobs_size(); ++t) {
        ASSERT_EQ(got.logprobs(t).top_size(), want.logprobs(t).top_size());
        for (int k = 0; k < want.logprobs(t).top_size(); ++k) {
          const double a = got.logprobs(t).top(k).logprob();
          const double b = want.logprobs(t).top(k).logprob();
          EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::abs(b)))
              << "request " << r << " token " << t << " rank " << k << " at size " << size;
        }
      }
    }
    // Rank 0 reports its all-reduce time: the step did communicate.
    grpc::ClientContext after_context;
    ASSERT_TRUE(stub->GetModelInfo(&after_context, pagoda::v1::GetModelInfoRequest(), &info).ok());
    EXPECT_GT(info.engine_stats().all_reduce_seconds_total(), 0);
    EXPECT_LT(info.engine_stats().all_reduce_seconds_total(),
              info.engine_stats().forward_seconds_total());
    // The same on /metrics.
    const double all_reduce =
        MetricValue((*server)->metrics_port(), "pagoda_all_reduce_seconds_total");
    EXPECT_GT(all_reduce, 0);
    EXPECT_LT(all_reduce, MetricValue((*server)->metrics_port(), "pagoda_forward_seconds_total"));
  }
}

TEST_F(TensorParallelTest, IndivisibleHeadCountsAreRefusedAtStartInOneLine) {
  const std::string log = *model_dir_ + "_refused.log";
  const absl::Time start = absl::Now();
  auto output =
      RunCommand(absl::StrCat(PAGODA_SERVER_BINARY, " --model=", *model_dir_,
                              " --tensor-parallel-size=3 --port=0 2> ", log, "; echo exit=$?"));
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_TRUE(absl::StrContains(*output, "exit=1")) << *output;
  EXPECT_FALSE(absl::StrContains(*output, "PAGODA_WORKER_PIDS")) << "workers were started";
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  std::ifstream file(log);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_TRUE(absl::StrContains(text.str(),
                                "cannot split the model over 3 tensor-parallel ranks: "
                                "num_attention_heads (4) is not divisible by 3"))
      << text.str();
  std::filesystem::remove(log);

  // Bad group flags are refused before any worker starts, naming the flag.
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"--rendezvous-host=foo", "--rendezvous-host must be an IPv4 address"},
           {"--rendezvous-port=99999",
            "--rendezvous-port 99999 is out of range: expected 0 to 65535"},
           {"--collective-timeout=0", "--collective-timeout 0 is out of range: expected (0, 600]"},
           {"--tensor-parallel-size=65",
            "--tensor-parallel-size 65 is out of range: expected 1 to 64"}}) {
    auto refused = RunCommand(absl::StrCat(PAGODA_SERVER_BINARY, " --model=", *model_dir_,
                                           " --tensor-parallel-size=2 --port=0 ", flag, " 2>&1",
                                           "; echo exit=$?"));
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_TRUE(absl::StrContains(*refused, "exit=1")) << flag << ": " << *refused;
    EXPECT_TRUE(absl::StrContains(*refused, message)) << flag << ": " << *refused;
    EXPECT_FALSE(absl::StrContains(*refused, "PAGODA_WORKER_PIDS")) << flag;
  }
  // A worker whose collectives cannot listen where asked refuses to start.
  const std::string secret = *model_dir_ + "_secret";
  std::ofstream(secret) << "0123456789abcdef0123456789abcdef\n";
  std::filesystem::permissions(secret,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto worker = RunCommand(absl::StrCat(PAGODA_WORKER_BINARY, " --secret-file=", secret,
                                        " --collective-host=not-an-ip 2>&1; echo exit=$?"));
  std::filesystem::remove(secret);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_TRUE(absl::StrContains(*worker, "exit=1")) << *worker;
  EXPECT_TRUE(absl::StrContains(*worker, "--collective-host must be an IPv4 address")) << *worker;
}

TEST_F(TensorParallelTest, KilledRankEndsRequestsUnavailableWithoutHanging) {
  auto server = StartServer(2, {"--worker-restart-limit=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  std::atomic<int> received{0};
  std::vector<StreamOutcome> outcomes(4);
  std::vector<std::thread> clients;
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] {
      outcomes[i] = RunStream(*stub, TokenRequest(TestPrompt(4 + i, 20 + i), 400), &received);
    });
  }
  ASSERT_TRUE(WaitFor([&] { return received.load() >= 8; }, absl::Seconds(60)));
  ASSERT_EQ(kill((*server)->worker_pids().at(1), SIGKILL), 0);
  const absl::Time killed = absl::Now();
  for (std::thread& client : clients) client.join();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(10));
  for (const StreamOutcome& outcome : outcomes) {
    EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << outcome.status.error_message();
    EXPECT_LT(outcome.tokens.size(), 400u);
  }
  // Health follows within its refresh period.
  EXPECT_TRUE(WaitFor([&] { return HealthStatus((*server)->address()) == 2; }, absl::Seconds(5)))
      << "health is still SERVING";
}

// A rank that stops answering (SIGSTOP: alive, connections open, but silent)
// is found by the keepalive pings; its peer, stuck in a collective, does not
// hold the requests either.
TEST_F(TensorParallelTest, StoppedRankEndsRequestsUnavailableWithoutHanging) {
  auto server = StartServer(2, {"--worker-restart-limit=0", "--worker-stall-timeout=2"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  std::atomic<int> received{0};
  StreamOutcome outcome;
  std::thread client(
      [&] { outcome = RunStream(*stub, TokenRequest(TestPrompt(5, 31), 400), &received); });
  ASSERT_TRUE(WaitFor([&] { return received.load() >= 4; }, absl::Seconds(60)));
  const pid_t stopped = (*server)->worker_pids().at(1);
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  // Let it go whatever happens, so it can see its server gone and exit.
  absl::Cleanup resume = [stopped] { kill(stopped, SIGCONT); };
  const absl::Time start = absl::Now();
  client.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << outcome.status.error_message();
  EXPECT_TRUE(WaitFor([&] { return HealthStatus((*server)->address()) == 2; }, absl::Seconds(5)));
}

// A port the OS just handed out and took back: free unless another process
// grabs it in between.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

// Restarts to run: PAGODA_TP_RESTARTS for a long run by hand (each costs
// about 2.5 s on 2 busy cores), else 1, as cheap as the test was without
// the racer.
int RestartsToRun() {
  const char* text = std::getenv("PAGODA_TP_RESTARTS");
  int restarts = 0;
  return text != nullptr && absl::SimpleAtoi(text, &restarts) && restarts > 0 ? restarts : 1;
}

// With a fixed --rendezvous-port, as in a cluster: each restarted group's
// store binds the same port again. A racer connects to every new TCP
// listener of the workers (their collective listeners above all) throughout:
// every restart must still succeed at its first attempt (a listener drops
// what fails its handshake) and every stream end with the tokens of an uninterrupted run. One
// restart reaches few listeners; PAGODA_TP_RESTARTS=50 is the long run
// (docs/tensor-parallelism.md has its figures).
TEST_F(TensorParallelTest, KilledRankRestartsTheGroupAndRequestsResumeWithTheSameTokens) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const int restarts = RestartsToRun();
  auto server = StartServer(2, {absl::StrCat("--rendezvous-port=", port),
                                // As many attempts as kills: one failed
                                // attempt and the server gives up.
                                absl::StrCat("--worker-restart-limit=", restarts)});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  const GenerateRequest request = TokenRequest(TestPrompt(6, 40), 200);
  const StreamOutcome expected = RunStream(*stub, request);
  ASSERT_TRUE(expected.status.ok()) << expected.status.error_message();

  // The server's children, the workers of every restart (ChildPids reads all
  // of /proc: at most every 20 ms, so the racer's scans stay fast).
  ListenerRacer racer(
      [pid = (*server)->pid(), workers = std::vector<pid_t>(),
       read_at = absl::InfinitePast()]() mutable {
        if (absl::Now() - read_at > absl::Milliseconds(20)) {
          workers = ChildPids(pid);
          read_at = absl::Now();
        }
        return workers;
      },
      {port});
  const absl::Time start = absl::Now();
  for (int restart = 1; restart <= restarts; ++restart) {
    std::atomic<int> received{0};
    StreamOutcome outcome;
    std::thread client([&] { outcome = RunStream(*stub, request, &received); });
    ASSERT_TRUE(WaitFor([&] { return received.load() >= 10; }, absl::Seconds(60)));
    const std::vector<pid_t> workers = ChildPids((*server)->pid());
    ASSERT_FALSE(workers.empty());
    ASSERT_EQ(kill(workers.front(), SIGKILL), 0);
    client.join();
    ASSERT_TRUE(outcome.status.ok()) << "restart " << restart << ": "
                                     << outcome.status.error_message();
    EXPECT_EQ(outcome.tokens, expected.tokens) << "restart " << restart;
    // Counted once the workers are back, which can come after a stream
    // that outran its reader ended.
    EXPECT_TRUE(WaitFor(
        [&] {
          return MetricValue((*server)->metrics_port(), "pagoda_worker_restarts_total") == restart;
        },
        absl::Seconds(60)));
  }
  std::printf("%d restarts under the racer in %lld ms; the racer connected %d times\n", restarts,
              static_cast<long long>(absl::ToInt64Milliseconds(absl::Now() - start)),
              racer.connections());
}

}  // namespace
}  // namespace pagoda::testing
