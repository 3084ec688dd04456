// Chunked prefill and priority scheduling end to end: real pagoda-server and
// pagoda-worker processes on the CPU. A chunk computes a slice of a prompt
// attending to everything before it, so every request must end with exactly
// the tokens of a run with whole prompts, at every budget, with a cached
// prefix, n = 4, beam search, swap and recompute preemption, tensor
// parallelism and a worker restart (one that lands while a prompt is
// part-way too), and stop strings.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
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

// Every sequence of a unary answer, in index order.
using Outputs = std::vector<std::vector<int32_t>>;

class ChunkedPrefillTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(
        (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_chunked_", getpid()))
            .string());
    ASSERT_TRUE(MakeTinyModel(*model_dir_).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
      std::vector<std::string> extra) {
    std::vector<std::string> args = {absl::StrCat("--model=", *model_dir_),
                                     "--max-model-len=256",
                                     "--block-size=4",
                                     "--cpu-threads=1",
                                     "--seed=5",
                                     "--port=0",
                                     "--metrics-port=-1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return ServerProcess::Start(PAGODA_SERVER_BINARY, args, absl::Seconds(60));
  }

  static std::unique_ptr<Generation::Stub> Stub(const ServerProcess& server) {
    return Generation::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  }

  // Prompts shorter and longer than the budgets; greedy and seeded; n = 4
  // and beam search; two that share a 40-token prefix.
  static std::vector<GenerateRequest> Requests() {
    std::vector<GenerateRequest> requests;
    int salt = 0;
    for (int length : {3, 9, 17, 70, 150}) {
      requests.push_back(TokenRequest(TestPrompt(length, ++salt), 12));
      ++salt;  // Apart from its use below: argument evaluation is unordered.
      requests.push_back(TokenRequest(TestPrompt(length, salt), 12, 700 + salt));
    }
    GenerateRequest four = TokenRequest(TestPrompt(33, ++salt), 10, 900);
    four.mutable_sampling()->set_n(4);
    requests.push_back(four);
    GenerateRequest beams = TokenRequest(TestPrompt(45, ++salt), 8);
    beams.mutable_sampling()->set_use_beam_search(true);
    beams.mutable_sampling()->set_best_of(3);
    beams.mutable_sampling()->set_n(2);
    requests.push_back(beams);
    std::vector<int32_t> shared = TestPrompt(40, ++salt);
    for (int tail : {5, 23}) {
      std::vector<int32_t> prompt = shared;
      for (int32_t id : TestPrompt(tail, ++salt)) prompt.push_back(id);
      requests.push_back(TokenRequest(prompt, 12));
    }
    return requests;
  }

  // Runs `requests` as concurrent unary calls, except that the last two
  // (the shared prefix) go one after the other, after the rest, so the
  // second finds the first's blocks cached.
  static std::vector<Outputs> RunAll(Generation::Stub& stub,
                                     const std::vector<GenerateRequest>& requests) {
    std::vector<Outputs> outputs(requests.size());
    auto run = [&](size_t i) {
      const UnaryOutcome outcome = Generate(stub, requests[i]);
      EXPECT_TRUE(outcome.status.ok()) << "request " << i << ": " << outcome.status.error_message();
      for (const auto& output : outcome.response.outputs()) {
        outputs[i].emplace_back(output.token_ids().begin(), output.token_ids().end());
      }
    };
    std::vector<std::thread> threads;
    for (size_t i = 0; i + 2 < requests.size(); ++i) threads.emplace_back(run, i);
    for (std::thread& thread : threads) thread.join();
    run(requests.size() - 2);
    run(requests.size() - 1);
    return outputs;
  }

  // The outputs of a roomy server with whole prompts: what every run must give.
  static const std::vector<Outputs>& Expected() {
    static const std::vector<Outputs>* expected = [] {
      auto server = StartServer({"--no-enable-chunked-prefill"});
      EXPECT_TRUE(server.ok()) << server.status();
      auto* outputs = new std::vector<Outputs>(RunAll(*Stub(**server), Requests()));
      for (const Outputs& output : *outputs) EXPECT_FALSE(output.empty());
      return outputs;
    }();
    return *expected;
  }

  static void ExpectSameOutputs(const std::vector<std::string>& flags) {
    auto server = StartServer(flags);
    ASSERT_TRUE(server.ok()) << server.status();
    const std::vector<Outputs> outputs = RunAll(*Stub(**server), Requests());
    const std::vector<Outputs>& expected = Expected();
    ASSERT_EQ(outputs.size(), expected.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_EQ(outputs[i], expected[i]) << "request " << i << " with " << flags.back();
    }
  }

  static std::string* model_dir_;
};

std::string* ChunkedPrefillTest::model_dir_ = nullptr;

TEST_F(ChunkedPrefillTest, SameTokensAtBudgets1_7_16_61AndTheDefault) {
  for (int budget : {1, 7, 16, 61}) {
    ExpectSameOutputs({absl::StrCat("--max-num-batched-tokens=", budget)});
  }
  ExpectSameOutputs({"--enable-chunked-prefill"});
}

TEST_F(ChunkedPrefillTest, SameTokensWithSeveralPartialPrefillsAndOneLongSlot) {
  ExpectSameOutputs({"--max-num-batched-tokens=16", "--max-num-partial-prefills=3",
                     "--long-prefill-token-threshold=8", "--max-long-partial-prefills=1"});
}

// A text prompt longer than the budget, with a stop string taken from the
// middle of the free run's text: chunks end the text where whole prompts do.
TEST_F(ChunkedPrefillTest, StopStringsEndTheTextWhereWholePromptsDo) {
  GenerateRequest request;
  std::string prompt;
  for (int i = 0; i < 12; ++i) absl::StrAppend(&prompt, "hello world number ", i, ". ");
  request.set_prompt(prompt);
  request.mutable_stopping()->set_max_tokens(40);
  request.mutable_stopping()->set_ignore_eos(true);
  auto whole = StartServer({"--no-enable-chunked-prefill"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const UnaryOutcome free_run = Generate(*Stub(**whole), request);
  ASSERT_TRUE(free_run.status.ok()) << free_run.status.error_message();
  ASSERT_GT(free_run.response.prompt_token_count(), 7);
  const std::string text = free_run.response.outputs(0).text();
  size_t middle = text.size() / 2;
  auto ascii = [&](size_t at) { return static_cast<unsigned char>(text[at]) < 0x80; };
  while (middle + 3 < text.size() && !(ascii(middle) && ascii(middle + 1) && ascii(middle + 2))) {
    ++middle;
  }
  ASSERT_LT(middle + 3, text.size()) << text;
  request.mutable_stopping()->add_stop(text.substr(middle, 3));
  const UnaryOutcome expected = Generate(*Stub(**whole), request);
  ASSERT_TRUE(expected.status.ok()) << expected.status.error_message();
  EXPECT_EQ(expected.response.outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_STOP);
  auto chunked = StartServer({"--max-num-batched-tokens=7"});
  ASSERT_TRUE(chunked.ok()) << chunked.status();
  const UnaryOutcome stopped = Generate(*Stub(**chunked), request);
  ASSERT_TRUE(stopped.status.ok()) << stopped.status.error_message();
  EXPECT_EQ(stopped.response.outputs(0).text(), expected.response.outputs(0).text());
  EXPECT_EQ(stopped.response.outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_STOP);
}

TEST_F(ChunkedPrefillTest, PromptLongerThanTheBudgetIsServedNotRefused) {
  auto server = StartServer({"--max-num-batched-tokens=16", "--metrics-port=-1"});
  ASSERT_TRUE(server.ok()) << server.status();
  const UnaryOutcome outcome = Generate(*Stub(**server), TokenRequest(TestPrompt(200, 3), 4));
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(outcome.response.outputs(0).token_ids_size(), 4);
  // Without chunks a step must hold the whole prompt: refused, as before.
  auto whole = StartServer({"--no-enable-chunked-prefill", "--max-num-batched-tokens=16"});
  ASSERT_TRUE(whole.ok()) << whole.status();
  const UnaryOutcome refused = Generate(*Stub(**whole), TokenRequest(TestPrompt(200, 3), 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ChunkedPrefillTest, SameTokensUnderSwapAndRecomputePreemption) {
  // Twelve requests whose prompts fit the cache but whose outputs do not:
  // 48 blocks of 4 tokens against 12 * (20 + 60) tokens. Some are n = 2;
  // recomputing one needs both its sequences' blocks at once (2 * 22), so
  // the cache must hold that much.
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 12; ++i) {
    GenerateRequest request = TokenRequest(TestPrompt(18 + i, 60 + i), 60, i % 2 ? 0 : 80 + i);
    if (i % 4 == 0) request.mutable_sampling()->set_n(2);
    requests.push_back(request);
  }
  // RunAll runs the last two one after the other: two more, unchecked.
  requests.push_back(TokenRequest(TestPrompt(5, 1), 2));
  requests.push_back(TokenRequest(TestPrompt(5, 1), 2));
  auto roomy = StartServer({"--no-enable-chunked-prefill"});
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  const std::vector<Outputs> expected = RunAll(*Stub(**roomy), requests);
  for (const char* mode : {"--preemption-mode=swap", "--preemption-mode=recompute"}) {
    auto server = StartServer(
        {"--max-num-batched-tokens=7", "--num-gpu-blocks-override=48", "--swap-space=0.05", mode});
    ASSERT_TRUE(server.ok()) << server.status();
    const std::vector<Outputs> outputs = RunAll(*Stub(**server), requests);
    for (size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_EQ(outputs[i], expected[i]) << "request " << i << " with " << mode;
    }
    EXPECT_GT(MetricValue((*server)->metrics_port(), "pagoda_num_preemptions_total"), 0) << mode;
  }
}

TEST_F(ChunkedPrefillTest, SameTokensAtTensorParallelSize2) {
  ExpectSameOutputs({"--tensor-parallel-size=2", "--max-num-batched-tokens=7"});
}

TEST_F(ChunkedPrefillTest, SameTokensAcrossAWorkerRestart) {
  auto server = StartServer({"--max-num-batched-tokens=16"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  // Long prompts and long outputs, so the kill lands mid-prefill or mid-decode.
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    requests.push_back(TokenRequest(TestPrompt(60 + 7 * i, i), 40, i % 2 == 0 ? 0 : 50 + i));
  }
  std::vector<StreamOutcome> expected(requests.size());
  std::vector<StreamOutcome> outcomes(requests.size());
  auto run_all = [&](std::vector<StreamOutcome>& into) {
    std::vector<std::thread> threads;
    for (size_t i = 0; i < requests.size(); ++i) {
      threads.emplace_back([&, i] { into[i] = RunStream(*stub, requests[i]); });
    }
    for (std::thread& thread : threads) thread.join();
  };
  run_all(expected);
  const int port = (*server)->metrics_port();
  // One run with a kill, once the server has every stream and has sent a
  // few tokens (its own counts: clients lag far behind it on a loaded
  // machine). False when every request had still finished before the kill:
  // the run proved nothing and runs again.
  auto run_with_kill = [&](int restarts_before) -> bool {
    // Every stream accepted first: one sent while the worker restarts would
    // be refused (UNAVAILABLE), which is not what this test is about.
    const double finished_before = MetricValue(port, "pagoda_request_success_total");
    auto finished = [&] {
      return MetricValue(port, "pagoda_request_success_total") - finished_before;
    };
    auto accepted = [&] { return AcceptedRequests(port, finished_before); };
    const double tokens_before = MetricValue(port, "pagoda_generation_tokens_total");
    std::thread clients([&] { run_all(outcomes); });
    const bool sent = WaitFor(
        [&] {
          return accepted() >= static_cast<double>(requests.size()) &&
                 MetricValue(port, "pagoda_generation_tokens_total") - tokens_before >= 3;
        },
        absl::Seconds(60));
    const bool mid_run = sent && finished() < static_cast<double>(requests.size());
    // The worker of now: an earlier run's kill replaced the first one.
    const std::vector<pid_t> workers = ChildPids((*server)->pid());
    EXPECT_EQ(workers.size(), 1u);
    EXPECT_EQ(workers.empty() ? -1 : kill(workers.front(), SIGKILL), 0);
    clients.join();
    EXPECT_TRUE(sent) << "the streams never all reached the server";
    // The restart is counted when the workers are back, which a run whose
    // requests had all finished does not wait for.
    EXPECT_TRUE(WaitFor(
        [&] { return MetricValue(port, "pagoda_worker_restarts_total") == restarts_before + 1; },
        absl::Seconds(60)));
    return mid_run;
  };
  bool mid_run = false;
  int restarts = 0;
  for (; restarts < 3 && !mid_run && !HasFatalFailure(); ++restarts) {
    mid_run = run_with_kill(restarts);
  }
  ASSERT_TRUE(mid_run) << "in three runs every request finished before the kill";
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(outcomes[i].tokens, expected[i].tokens) << "stream " << i;
  }
  EXPECT_EQ(MetricValue(port, "pagoda_worker_restarts_total"), restarts);
}

// One token a step, so a 240-token prompt is part-way for 240 steps: the
// metrics count it as running, not waiting (as vLLM), and a worker killed
// while it is part-way (before its first token, with chunks computed) costs
// it no token: it resumes by recomputation and ends as an undisturbed run.
TEST_F(ChunkedPrefillTest, APartWayPromptIsRunningAndSurvivesAWorkerKill) {
  // No prefix cache: the second run must compute the prompt again.
  auto server = StartServer({"--max-num-batched-tokens=1", "--no-enable-prefix-caching"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  const GenerateRequest request = TokenRequest(TestPrompt(240, 17), 6, 77);
  const StreamOutcome expected = RunStream(*stub, request);
  ASSERT_TRUE(expected.status.ok()) << expected.status.error_message();
  const int port = (*server)->metrics_port();
  const double prompt_tokens_before = MetricValue(port, "pagoda_prompt_tokens_total");
  std::atomic<int> received{0};
  StreamOutcome outcome;
  std::thread client([&] { outcome = RunStream(*stub, request, &received); });
  // Part-way: running, nothing waiting, some chunks computed, no token yet.
  const bool seen_part_way = WaitFor(
      [&] {
        return MetricValue(port, "pagoda_num_requests_running") == 1 &&
               MetricValue(port, "pagoda_num_requests_waiting") == 0 &&
               MetricValue(port, "pagoda_prompt_tokens_total") >= prompt_tokens_before + 20 &&
               received.load() == 0;
      },
      absl::Seconds(60));
  if (seen_part_way) {
    ASSERT_EQ(kill((*server)->worker_pids().at(0), SIGKILL), 0);
  }
  client.join();
  ASSERT_TRUE(seen_part_way);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  EXPECT_EQ(outcome.tokens, expected.tokens);
  EXPECT_TRUE(WaitFor([&] { return MetricValue(port, "pagoda_worker_restarts_total") == 1; },
                      absl::Seconds(60)));
}

// Two seats, both held by long low-priority streams; then four low-priority
// requests, then two high-priority ones. The high-priority ones preempt a
// running stream and start before every earlier low-priority one, and the
// preempted streams still end with the tokens of an undisturbed run.
TEST_F(ChunkedPrefillTest, PriorityRequestsOvertakeAndPreemptedOnesKeepTheirTokens) {
  auto server = StartServer(
      {"--scheduling-policy=priority", "--max-num-seqs=2", "--max-num-batched-tokens=16"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Stub(**server);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 8; ++i) {
    GenerateRequest request =
        TokenRequest(TestPrompt(10 + i, 40 + i), i < 2 ? 230 : 20, i % 2 == 0 ? 0 : 300 + i);
    request.set_priority(i < 6 ? 10 : -5);
    requests.push_back(request);
  }
  std::vector<StreamOutcome> expected(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) expected[i] = RunStream(*stub, requests[i]);

  const int port = (*server)->metrics_port();
  // One run of the scenario. False when its premise failed: when the last
  // high-priority request reached the server, a long stream had all its
  // tokens or a low-priority one had a token (a seat came free early, which
  // a stalled client thread on a loaded machine can cause); it then runs
  // again.
  std::vector<StreamOutcome> outcomes(requests.size());
  auto run_scenario = [&]() -> bool {
    std::vector<std::atomic<int>> received(requests.size());
    std::vector<std::thread> threads;
    auto start = [&](size_t i) {
      threads.emplace_back([&, i] { outcomes[i] = RunStream(*stub, requests[i], &received[i]); });
    };
    const double finished_before = MetricValue(port, "pagoda_request_success_total");
    // Requests the server holds or has finished. The finished count is read
    // first: a request that ends between the reads is counted in neither,
    // never twice, so the wait below never ends early.
    auto arrived = [&] {
      const double done = MetricValue(port, "pagoda_request_success_total") - finished_before;
      return done + MetricValue(port, "pagoda_num_requests_running") +
             MetricValue(port, "pagoda_num_requests_waiting") +
             MetricValue(port, "pagoda_num_requests_swapped");
    };
    start(0);
    start(1);
    bool sent = WaitFor([&] { return received[0].load() > 0 && received[1].load() > 0; },
                        absl::Seconds(30));
    // The others at once: which low-priority request arrives first does not
    // matter, only that the two long streams still hold both seats when the
    // high-priority ones come (checked below).
    for (size_t i = 2; i < requests.size() && sent; ++i) start(i);
    sent = sent && WaitFor([&] { return arrived() >= static_cast<double>(requests.size()); },
                           absl::Seconds(30));
    bool seats_were_held = sent;
    for (size_t i = 0; i < 2; ++i) {
      seats_were_held &= received[i].load() < static_cast<int>(expected[i].tokens.size());
    }
    for (size_t i = 2; i < 6; ++i) seats_were_held &= received[i].load() == 0;
    for (std::thread& thread : threads) thread.join();
    EXPECT_TRUE(sent) << "a request never reached the server";
    return seats_were_held;
  };
  bool seats_were_held = false;
  for (int attempt = 0; attempt < 3 && !seats_were_held; ++attempt) {
    seats_were_held = run_scenario();
  }
  ASSERT_TRUE(seats_were_held) << "in three runs a seat always came free before the last "
                                  "high-priority request arrived";
  // When each stream's first token arrived, read on its own thread.
  for (int high : {6, 7}) {
    for (int low : {2, 3, 4, 5}) {
      EXPECT_LT(outcomes[high].first_token_at, outcomes[low].first_token_at) << high << " " << low;
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(outcomes[i].tokens, expected[i].tokens) << "stream " << i;
  }
  EXPECT_GT(MetricValue(port, "pagoda_num_preemptions_total"), 0);
}

TEST_F(ChunkedPrefillTest, PriorityOutOfBoundsIsInvalidArgument) {
  auto server = StartServer({});
  ASSERT_TRUE(server.ok()) << server.status();
  for (int priority : {1'000'001, -1'000'001}) {
    GenerateRequest request = TokenRequest(TestPrompt(5, 1), 2);
    request.set_priority(priority);
    const UnaryOutcome outcome = Generate(*Stub(**server), request);
    EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(outcome.status.error_message().rfind("priority:", 0), 0u)
        << outcome.status.error_message();
  }
}

}  // namespace
}  // namespace pagoda::testing
