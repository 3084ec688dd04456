// End to end: real pagoda-server + pagoda-worker processes on loopback with a
// tiny random Llama model, checked against the float64 NumPy reference.
#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "pagoda/v1/generation.grpc.pb.h"
#include "tests/integration/server_process.h"
#include "tests/integration/test_client.h"
#include "tests/support/tiny_model.h"

namespace pagoda::testing {
namespace {

using pagoda::v1::GenerateRequest;
using pagoda::v1::GenerateResponse;
using pagoda::v1::Generation;

constexpr int kMaxModelLen = 128;
constexpr int kNumBlocks = 400;
constexpr int kBlockSize = 4;

std::vector<int32_t> Tokens(const GenerateResponse& response) {
  if (response.outputs_size() == 0) return {};
  return {response.outputs(0).token_ids().begin(), response.outputs(0).token_ids().end()};
}

struct StreamResult {
  grpc::Status status;
  std::vector<GenerateResponse> messages;
};

StreamResult Stream(Generation::Stub& stub, const GenerateRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  StreamResult result;
  auto reader = stub.GenerateStream(&context, request);
  GenerateResponse message;
  while (reader->Read(&message)) result.messages.push_back(message);
  result.status = reader->Finish();
  return result;
}

std::unique_ptr<Generation::Stub> Connect(const ServerProcess& server) {
  return Generation::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
}

// Polls GetModelInfo until `done` holds (true) or `timeout` passes (false).
bool WaitForInfo(Generation::Stub& stub,
                 const std::function<bool(const pagoda::v1::ModelInfo&)>& done,
                 absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done(InfoOf(stub))) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

bool AllBlocksFreeAndIdle(const pagoda::v1::ModelInfo& info) {
  return info.free_gpu_blocks() == info.num_gpu_blocks() &&
         info.engine_stats().num_in_flight() == 0;
}

// pagoda_request_success_total for one finish reason, from /metrics; -1 if absent.
int FinishedWithReason(int metrics_port, const std::string& reason) {
  absl::StatusOr<std::string> page = HttpGet(metrics_port, "/metrics");
  if (!page.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(*page, '\n')) {
    if (!absl::StartsWith(line, "pagoda_request_success_total{") ||
        !absl::StrContains(line, absl::StrCat("finished_reason=\"", reason, "\""))) {
      continue;
    }
    double value = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) return static_cast<int>(value);
  }
  return -1;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(TempPath("pagoda_it"));
    const absl::Status made = MakeTinyModel(*model_dir_);
    ASSERT_TRUE(made.ok()) << made;
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer({
        absl::StrCat("--max-model-len=", kMaxModelLen),
        "--metrics-port=-1",
        "--served-model-name=tiny",
    });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }

  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  // A server on the shared tiny model with the common flags plus `extra`.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
      std::vector<std::string> extra) {
    std::vector<std::string> args = {
        absl::StrCat("--model=", *model_dir_),
        absl::StrCat("--block-size=", kBlockSize),
        absl::StrCat("--num-gpu-blocks-override=", kNumBlocks),
        "--seed=5",
        "--port=0",
    };
    args.insert(args.end(), extra.begin(), extra.end());
    return ServerProcess::Start(PAGODA_SERVER_BINARY, args, absl::Seconds(60));
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(*server_);
  }

  static std::vector<std::vector<int32_t>> ReferenceBatch(
      const std::vector<std::vector<int32_t>>& prompts, const std::vector<int>& max_tokens) {
    nlohmann::json requests = nlohmann::json::array();
    for (size_t i = 0; i < prompts.size(); ++i) {
      requests.push_back(
          {{"tokens", prompts[i]}, {"max_tokens", max_tokens[i]}, {"ignore_eos", true}});
    }
    const std::string path = absl::StrCat(*model_dir_, "/requests.json");
    std::ofstream(path) << requests.dump();
    absl::StatusOr<std::string> out = RunCommand(
        absl::StrCat(PythonBinary(), " tests/reference/llama_reference.py generate-batch",
                     " --model ", *model_dir_, " --requests ", path));
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    return nlohmann::json::parse(*out).get<std::vector<std::vector<int32_t>>>();
  }

  pagoda::v1::ModelInfo Info() {
    grpc::ClientContext context;
    pagoda::v1::ModelInfo info;
    EXPECT_TRUE(stub_->GetModelInfo(&context, pagoda::v1::GetModelInfoRequest(), &info).ok());
    return info;
  }

  // Blocks are freed at the engine's next step: allow it a moment.
  void ExpectAllBlocksFreeSoon() {
    pagoda::v1::ModelInfo info;
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    do {
      info = Info();
      if (info.free_gpu_blocks() == info.num_gpu_blocks()) break;
      absl::SleepFor(absl::Milliseconds(20));
    } while (absl::Now() < deadline);
    EXPECT_EQ(info.free_gpu_blocks(), info.num_gpu_blocks());
    EXPECT_EQ(info.num_gpu_blocks(), kNumBlocks);
  }

  static std::string* model_dir_;
  static ServerProcess* server_;
  std::unique_ptr<Generation::Stub> stub_;
};

std::string* ServerTest::model_dir_ = nullptr;
ServerProcess* ServerTest::server_ = nullptr;

TEST_F(ServerTest, ModelInfoAndHealth) {
  const pagoda::v1::ModelInfo info = Info();
  EXPECT_EQ(info.model_name(), "tiny");
  EXPECT_EQ(info.vocab_size(), kTinyModelVocab);
  EXPECT_EQ(info.max_model_len(), kMaxModelLen);
  EXPECT_EQ(info.block_size(), kBlockSize);
  EXPECT_EQ(info.num_gpu_blocks(), kNumBlocks);
  EXPECT_EQ(info.tensor_parallel_size(), 1);
  EXPECT_EQ(info.device(), "cpu");
  ASSERT_EQ(info.eos_token_ids_size(), 1);
  EXPECT_EQ(info.eos_token_ids(0), 2);
  EXPECT_TRUE(info.workers_healthy());
  EXPECT_EQ(HealthStatus(server_->address()), 1);
}

TEST_F(ServerTest, GreedyTokensMatchReference) {
  const std::vector<int32_t> prompt = TestPrompt(13, 1);
  UnaryOutcome result = Generate(*stub_, TokenRequest(prompt, 10));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(Tokens(result.response), ReferenceBatch({prompt}, {10})[0]);
  EXPECT_EQ(result.response.prompt_token_count(), 13);
  EXPECT_EQ(result.response.outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_LENGTH);
  EXPECT_FALSE(result.response.request_id().empty());
}

TEST_F(ServerTest, ConcurrentRequestsGiveTheirSoloTokens) {
  constexpr int kRequests = 32;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
  for (int i = 0; i < kRequests; ++i) {
    // Mixed lengths; several span many 4-token blocks.
    prompts.push_back(TestPrompt(i % 4 == 0 ? 40 + i : 1 + (i * 7) % 23, i));
    max_tokens.push_back(3 + i % 6);
  }
  const std::vector<std::vector<int32_t>> reference = ReferenceBatch(prompts, max_tokens);
  ASSERT_EQ(reference.size(), prompts.size());
  std::vector<UnaryOutcome> solo;
  for (int i = 0; i < 4; ++i)
    solo.push_back(Generate(*stub_, TokenRequest(prompts[i], max_tokens[i])));
  std::vector<UnaryOutcome> together(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back(
        [&, i] { together[i] = Generate(*stub_, TokenRequest(prompts[i], max_tokens[i])); });
  }
  for (std::thread& client : clients) client.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(together[i].status.ok()) << i << ": " << together[i].status.error_message();
    EXPECT_EQ(Tokens(together[i].response), reference[i]) << "request " << i;
    if (i < 4) {
      EXPECT_EQ(Tokens(together[i].response), Tokens(solo[i].response)) << i;
    }
  }
  ExpectAllBlocksFreeSoon();
}

TEST_F(ServerTest, StreamDeliversTheSameTokensInOrder) {
  const GenerateRequest request = TokenRequest(TestPrompt(9, 3), 8);
  UnaryOutcome whole = Generate(*stub_, request);
  ASSERT_TRUE(whole.status.ok());
  StreamResult stream = Stream(*stub_, request);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();
  ASSERT_EQ(stream.messages.size(), 8u);  // One token per step.
  std::vector<int32_t> tokens;
  std::string text;
  for (size_t i = 0; i < stream.messages.size(); ++i) {
    const GenerateResponse& message = stream.messages[i];
    ASSERT_EQ(message.outputs_size(), 1);
    tokens.insert(tokens.end(), message.outputs(0).token_ids().begin(),
                  message.outputs(0).token_ids().end());
    text += message.outputs(0).text();
    EXPECT_EQ(message.outputs(0).finish_reason(), i + 1 == stream.messages.size()
                                                      ? pagoda::v1::FINISH_REASON_LENGTH
                                                      : pagoda::v1::FINISH_REASON_UNSPECIFIED);
  }
  EXPECT_EQ(tokens, Tokens(whole.response));
  EXPECT_EQ(text, whole.response.outputs(0).text());
  EXPECT_FALSE(text.empty());
}

TEST_F(ServerTest, TextPromptIsTokenizedWithBos) {
  GenerateRequest request;
  request.set_prompt("hello world");
  request.mutable_stopping()->set_max_tokens(4);
  request.mutable_stopping()->set_ignore_eos(true);
  UnaryOutcome result = Generate(*stub_, request);
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_GT(result.response.prompt_token_count(), 1);
  EXPECT_EQ(Tokens(result.response).size(), 4u);
}

TEST_F(ServerTest, CancelMidStreamFreesBlocks) {
  grpc::ClientContext context;
  auto reader = stub_->GenerateStream(&context, TokenRequest(TestPrompt(30, 4), kMaxModelLen - 30));
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_TRUE(reader->Read(&message));
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ExpectAllBlocksFreeSoon();
}

// Stop strings end the text before the first one, in Generate and
// GenerateStream, and the engine frees the request's blocks at once.
TEST_F(ServerTest, StopStringTrimsTheTextAndFreesBlocks) {
  GenerateRequest request;
  request.set_prompt("hello world");
  request.mutable_stopping()->set_max_tokens(40);
  request.mutable_stopping()->set_ignore_eos(true);
  UnaryOutcome free_run = Generate(*stub_, request);
  ASSERT_TRUE(free_run.status.ok()) << free_run.status.error_message();
  const std::string text = free_run.response.outputs(0).text();
  ASSERT_GT(text.size(), 8u) << text;
  // Three ASCII bytes from the middle; the text ends before their first
  // occurrence.
  size_t middle = text.size() / 2;
  while (middle + 3 < text.size() && (static_cast<unsigned char>(text[middle]) >= 0x80 ||
                                      static_cast<unsigned char>(text[middle + 1]) >= 0x80 ||
                                      static_cast<unsigned char>(text[middle + 2]) >= 0x80)) {
    ++middle;
  }
  const std::string stop = text.substr(middle, 3);
  const std::string expected = text.substr(0, text.find(stop));
  request.mutable_stopping()->add_stop(stop);

  UnaryOutcome stopped = Generate(*stub_, request);
  ASSERT_TRUE(stopped.status.ok()) << stopped.status.error_message();
  EXPECT_EQ(stopped.response.outputs(0).text(), expected) << "stop " << stop;
  EXPECT_EQ(stopped.response.outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_STOP);
  EXPECT_LT(stopped.response.outputs(0).token_ids_size(), 40);
  ExpectAllBlocksFreeSoon();

  grpc::ClientContext context;
  auto reader = stub_->GenerateStream(&context, request);
  GenerateResponse message;
  std::string streamed;
  pagoda::v1::FinishReason last_reason = pagoda::v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&message)) {
    for (const auto& output : message.outputs()) {
      streamed += output.text();
      last_reason = output.finish_reason();
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(last_reason, pagoda::v1::FINISH_REASON_STOP);
  ExpectAllBlocksFreeSoon();

  request.mutable_stopping()->add_stop("");
  EXPECT_EQ(Generate(*stub_, request).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServerTest, PromptPlusMaxTokensPastMaxModelLenEndsWithLength) {
  UnaryOutcome result = Generate(*stub_, TokenRequest(TestPrompt(kMaxModelLen - 3, 5), 50));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(result.response.outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(result.response.prompt_token_count() + Tokens(result.response).size(),
            static_cast<size_t>(kMaxModelLen));
}

TEST_F(ServerTest, SeededSamplingIsTheSameAloneAndInABusyBatch) {
  GenerateRequest seeded = TokenRequest(TestPrompt(11, 6), 12);
  seeded.mutable_sampling()->set_temperature(0.9f);
  seeded.mutable_sampling()->set_top_k(40);
  seeded.mutable_sampling()->set_top_p(0.95f);
  seeded.mutable_sampling()->set_seed(4242);
  UnaryOutcome alone = Generate(*stub_, seeded);
  ASSERT_TRUE(alone.status.ok());
  std::vector<UnaryOutcome> others(12);
  UnaryOutcome busy;
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&, i] {
      GenerateRequest other = TokenRequest(TestPrompt(5 + i * 3, 20 + i), 16);
      if (i % 2 == 0) other.mutable_sampling()->set_temperature(1.0f);
      others[i] = Generate(*stub_, other);
    });
  }
  clients.emplace_back([&] { busy = Generate(*stub_, seeded); });
  for (std::thread& client : clients) client.join();
  ASSERT_TRUE(busy.status.ok());
  EXPECT_EQ(Tokens(busy.response), Tokens(alone.response));
  for (const UnaryOutcome& other : others) EXPECT_TRUE(other.status.ok());
}

TEST_F(ServerTest, BadInputIsInvalidArgumentNamingTheField) {
  struct Case {
    std::string field;
    std::function<void(GenerateRequest&)> mutate;
  };
  const std::vector<Case> cases = {
      {"prompt", [](GenerateRequest& r) { r.clear_prompt_token_ids(); }},
      {"prompt", [](GenerateRequest& r) { r.set_prompt("both"); }},
      {"prompt_token_ids[1]",
       [](GenerateRequest& r) { r.set_prompt_token_ids(1, kTinyModelVocab); }},
      {"prompt",
       [](GenerateRequest& r) {
         for (int i = 0; i < kMaxModelLen; ++i) r.add_prompt_token_ids(5);
       }},
      {"sampling.temperature",
       [](GenerateRequest& r) { r.mutable_sampling()->set_temperature(-1); }},
      {"sampling.temperature",
       [](GenerateRequest& r) { r.mutable_sampling()->set_temperature(std::nanf("")); }},
      {"sampling.top_p", [](GenerateRequest& r) { r.mutable_sampling()->set_top_p(1.5f); }},
      {"sampling.top_k", [](GenerateRequest& r) { r.mutable_sampling()->set_top_k(-3); }},
      {"sampling.n", [](GenerateRequest& r) { r.mutable_sampling()->set_n(-1); }},
      {"sampling.best_of", [](GenerateRequest& r) { r.mutable_sampling()->set_best_of(-1); }},
      {"logprobs", [](GenerateRequest& r) { r.set_logprobs(21); }},
      {"stopping.max_tokens", [](GenerateRequest& r) { r.mutable_stopping()->set_max_tokens(-1); }},
      {"stopping.min_tokens", [](GenerateRequest& r) { r.mutable_stopping()->set_min_tokens(-1); }},
      {"stopping.min_tokens", [](GenerateRequest& r) { r.mutable_stopping()->set_min_tokens(9); }},
  };
  for (const Case& c : cases) {
    GenerateRequest request = TokenRequest({5, 6, 7}, 8);
    c.mutate(request);
    UnaryOutcome unary = Generate(*stub_, request);
    EXPECT_EQ(unary.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_TRUE(absl::StartsWith(unary.status.error_message(), c.field))
        << c.field << " vs " << unary.status.error_message();
    StreamResult stream = Stream(*stub_, request);
    EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_TRUE(stream.messages.empty());
  }
  GenerateRequest several = TokenRequest({5}, 2);
  several.mutable_sampling()->set_n(2);  // Greedy: the samples would all be equal.
  EXPECT_EQ(Generate(*stub_, several).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Still serving.
  EXPECT_TRUE(Generate(*stub_, TokenRequest({5, 6}, 2)).status.ok());
}

TEST_F(ServerTest, DuplicateInFlightRequestIdIsAlreadyExists) {
  GenerateRequest request = TokenRequest(TestPrompt(5, 7), kMaxModelLen - 5);
  request.set_request_id("same-id");
  grpc::ClientContext context;
  auto reader = stub_->GenerateStream(&context, request);
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  EXPECT_EQ(message.request_id(), "same-id");
  EXPECT_EQ(Generate(*stub_, request).status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  reader->Finish();
  ExpectAllBlocksFreeSoon();
}

TEST_F(ServerTest, MetricsAreScraped) {
  ASSERT_TRUE(Generate(*stub_, TokenRequest({5, 6, 7}, 3)).status.ok());
  ASSERT_GT(server_->metrics_port(), 0);
  absl::StatusOr<std::string> page = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(page.ok()) << page.status();
  for (const char* name :
       {"pagoda_generation_tokens_total{model_name=\"tiny\"}", "pagoda_gpu_blocks_total",
        "pagoda_num_requests_running", "pagoda_time_to_first_token_seconds_count",
        "pagoda_e2e_request_latency_seconds_bucket", "pagoda_request_success_total",
        "pagoda_step_time_seconds_count", "pagoda_gpu_cache_usage_perc",
        "pagoda_kv_token_utilization_perc", "pagoda_mask_wait_seconds_total",
        "pagoda_engine_cpu_seconds_total", "pagoda_steps_total",
        "pagoda_overlapped_steps_total"}) {
    EXPECT_TRUE(absl::StrContains(*page, name)) << name;
  }
  // Overlapped scheduling is on by default: a request of several decode
  // steps has some of them sent while the one before still ran.
  ASSERT_TRUE(Generate(*stub_, TokenRequest({5, 6, 8}, 8)).status.ok());
  const int port = server_->metrics_port();
  EXPECT_TRUE(WaitFor(
      [port] { return MetricValue(port, "pagoda_overlapped_steps_total") > 0; }, absl::Seconds(30)));
  EXPECT_LE(MetricValue(port, "pagoda_overlapped_steps_total"),
            MetricValue(port, "pagoda_steps_total"));
  const pagoda::v1::ModelInfo info = Info();
  EXPECT_GT(info.engine_stats().num_steps(), 0);
  EXPECT_GT(info.engine_stats().generation_tokens_total(), 0);
  EXPECT_GT(info.engine_stats().forward_seconds_total(), 0);
  // The engine thread ran in every step, and only some of its wall time.
  const pagoda::v1::EngineStats& stats = info.engine_stats();
  EXPECT_GT(stats.engine_cpu_seconds_total(), 0);
  EXPECT_LT(stats.engine_cpu_seconds_total(),
            stats.schedule_seconds_total() + stats.worker_rpc_seconds_total() +
                stats.forward_seconds_total() + stats.postprocess_seconds_total() + 0.05);
}

TEST_F(ServerTest, KilledWorkerFailsRequestsWithUnavailableWhenRestartsAreOff) {
  // --worker-restart-limit=0: fail-stop, as before supervision (see
  // survival_integration_test.cc for restarts).
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer({"--worker-restart-limit=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ((*server)->worker_pids().size(), 1u);
  auto stub = Connect(**server);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub->GenerateStream(&context, TokenRequest(TestPrompt(5, 8), 500));
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  ASSERT_EQ(kill((*server)->worker_pids()[0], SIGKILL), 0);
  const absl::Time killed = absl::Now();
  int more = 0;
  while (reader->Read(&message)) ++more;
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));
  EXPECT_LT(more, 499);
  int health = 0;
  for (int i = 0; i < 50 && health != 2; ++i) {
    health = HealthStatus((*server)->address());
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(health, 2);  // NOT_SERVING.
  EXPECT_EQ(Generate(*stub, TokenRequest({5, 6}, 2)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ServerTest, ConnectsToRunningWorkersByAddress) {
  const std::string secret_file = absl::StrCat(*model_dir_, "/worker_secret");
  std::ofstream(secret_file) << "connected-worker-secret-0123456789\n";
  std::filesystem::permissions(secret_file,
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  absl::StatusOr<std::unique_ptr<ServerProcess>> worker = ServerProcess::Start(
      PAGODA_WORKER_BINARY,
      {"--listen=127.0.0.1:0", "--rank=0", absl::StrCat("--secret-file=", secret_file)},
      absl::Seconds(30), "PAGODA_WORKER_LISTENING");
  ASSERT_TRUE(worker.ok()) << worker.status();
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      StartServer({absl::StrCat("--worker-addresses=", (*worker)->address()),
                   absl::StrCat("--worker-secret-file=", secret_file)});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE((*server)->worker_pids().empty());  // Nothing spawned.
  auto stub = Connect(**server);
  const std::vector<int32_t> prompt = TestPrompt(6, 10);
  UnaryOutcome result = Generate(*stub, TokenRequest(prompt, 5));
  ASSERT_TRUE(result.status.ok()) << result.status.error_message();
  EXPECT_EQ(Tokens(result.response), ReferenceBatch({prompt}, {5})[0]);
  // Shutting the server down shuts the connected worker down too.
  (*server)->Signal(SIGTERM);
  EXPECT_EQ((*server)->WaitForExit(absl::Seconds(15)), std::optional<int>(0));
  EXPECT_EQ((*worker)->WaitForExit(absl::Seconds(15)), std::optional<int>(0));
}

TEST_F(ServerTest, SigtermDrainsInFlightRequestsAndExitsZero) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer({});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Connect(**server);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  constexpr int kTokens = 400;  // Long enough to still run while we probe the drain.
  auto reader = stub->GenerateStream(&context, TokenRequest(TestPrompt(5, 9), kTokens));
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  int tokens = message.outputs(0).token_ids_size();
  (*server)->Signal(SIGTERM);
  // Draining: health turns NOT_SERVING and new work is refused, while the
  // stream goes on.
  int health = 0;
  for (int i = 0; i < 100 && health != 2; ++i) {
    health = HealthStatus((*server)->address());
    if (health != 2) absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(health, 2);
  const UnaryOutcome refused = Generate(*stub, TokenRequest({5, 6}, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.status.error_message();
  pagoda::v1::FinishReason reason = pagoda::v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&message)) {
    tokens += message.outputs(0).token_ids_size();
    reason = message.outputs(0).finish_reason();
  }
  const grpc::Status status = reader->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(tokens, kTokens);
  EXPECT_EQ(reason, pagoda::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ((*server)->WaitForExit(absl::Seconds(15)), std::optional<int>(0));
}

// A unary Generate whose client goes away (cancel, deadline) is aborted and
// frees its blocks; a full queue is RESOURCE_EXHAUSTED for both methods.
TEST_F(ServerTest, UnaryClientGoneFreesBlocksAndFullQueueIsResourceExhausted) {
  // One sequence at a time, so later requests wait; default max-model-len
  // (512) for long requests.
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      StartServer({"--max-num-seqs=1", "--max-queued-requests=3", "--metrics-port=-1"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = Connect(**server);
  constexpr int kLong = 500;

  // Cancelled mid-generation: the client sees CANCELLED, the server frees.
  {
    grpc::ClientContext context;
    UnaryOutcome result;
    std::thread client([&] {
      result.status =
          stub->Generate(&context, TokenRequest(TestPrompt(9, 11), kLong), &result.response);
    });
    const bool holding = WaitForInfo(*stub, [](const pagoda::v1::ModelInfo& info) {
      return info.free_gpu_blocks() < info.num_gpu_blocks();
    });
    context.TryCancel();
    client.join();
    ASSERT_TRUE(holding);
    EXPECT_EQ(result.status.error_code(), grpc::StatusCode::CANCELLED)
        << result.status.error_message();
    EXPECT_TRUE(WaitForInfo(*stub, AllBlocksFreeAndIdle, absl::Seconds(5)));
    EXPECT_EQ(FinishedWithReason((*server)->metrics_port(), "abort"), 1);
  }

  // One long stream runs and two wait behind it; a unary one fills the queue.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<GenerateResponse>>> streams;
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(
        stub->GenerateStream(contexts.back().get(), TokenRequest(TestPrompt(5, 12 + i), kLong)));
  }
  ASSERT_TRUE(WaitForInfo(*stub, [](const pagoda::v1::ModelInfo& info) {
    return info.engine_stats().num_running() == 1 && info.engine_stats().num_waiting() == 2;
  }));
  grpc::ClientContext queued_context;
  UnaryOutcome queued;
  std::thread queued_client([&] {
    queued.status = stub->Generate(&queued_context, TokenRequest({5, 6, 7}, 4), &queued.response);
  });
  ASSERT_TRUE(WaitForInfo(*stub, [](const pagoda::v1::ModelInfo& info) {
    return info.engine_stats().num_waiting() == 3;
  }));
  const UnaryOutcome refused = Generate(*stub, TokenRequest({5, 6}, 2));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.status.error_message();
  const StreamResult refused_stream = Stream(*stub, TokenRequest({5, 6}, 2));
  EXPECT_EQ(refused_stream.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused_stream.status.error_message();
  EXPECT_TRUE(refused_stream.messages.empty());

  // The waiting unary call's client cancels: the server aborts it.
  queued_context.TryCancel();
  queued_client.join();
  EXPECT_EQ(queued.status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitForInfo(*stub, [&](const pagoda::v1::ModelInfo& info) {
    return info.engine_stats().num_waiting() <= 2 &&
           FinishedWithReason((*server)->metrics_port(), "abort") == 2;
  }));
  // A deadline that passes while waiting behind ~1000 tokens of work.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(50));
    GenerateResponse response;
    const grpc::Status status = stub->Generate(&context, TokenRequest({5, 6, 7}, 4), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  }
  // The server aborted it too.
  EXPECT_TRUE(WaitForInfo(*stub, [&](const pagoda::v1::ModelInfo&) {
    return FinishedWithReason((*server)->metrics_port(), "abort") == 3;
  }));

  for (auto& context : contexts) context->TryCancel();
  for (auto& stream : streams) {
    GenerateResponse message;
    while (stream->Read(&message)) {
    }
    stream->Finish();
  }
  EXPECT_TRUE(WaitForInfo(*stub, AllBlocksFreeAndIdle, absl::Seconds(5)));
}

// Past --drain-timeout, what is still in flight fails with UNAVAILABLE and
// the server still stops its workers and exits 0.
TEST_F(ServerTest, DrainTimeoutFailsTheRestWithUnavailableAndExitsZero) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer({"--drain-timeout=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ((*server)->worker_pids().size(), 1u);
  const pid_t worker = (*server)->worker_pids()[0];
  auto stub = Connect(**server);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  constexpr int kTokens = 500;
  auto reader = stub->GenerateStream(&context, TokenRequest(TestPrompt(5, 9), kTokens));
  GenerateResponse message;
  ASSERT_TRUE(reader->Read(&message));
  (*server)->Signal(SIGTERM);
  int tokens = message.outputs(0).token_ids_size();
  while (reader->Read(&message)) tokens += message.outputs(0).token_ids_size();
  const grpc::Status status = reader->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_LT(tokens, kTokens);
  EXPECT_EQ((*server)->WaitForExit(absl::Seconds(15)), std::optional<int>(0));
  EXPECT_EQ(kill(worker, 0), -1);  // Stopped and reaped by the server.
  EXPECT_EQ(errno, ESRCH);
}

// A spawned worker honours SIGTERM (it must not inherit the server's blocked
// signal mask); the server notices its exit and, with restarts off, turns
// UNAVAILABLE.
TEST_F(ServerTest, SpawnedWorkerStopsOnSigterm) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartServer({"--worker-restart-limit=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_EQ((*server)->worker_pids().size(), 1u);
  auto stub = Connect(**server);
  ASSERT_TRUE(Generate(*stub, TokenRequest({5, 6}, 2)).status.ok());
  ASSERT_EQ(kill((*server)->worker_pids()[0], SIGTERM), 0);
  EXPECT_TRUE(WaitForInfo(
      *stub, [](const pagoda::v1::ModelInfo& info) { return !info.workers_healthy(); },
      absl::Seconds(5)));
  EXPECT_EQ(Generate(*stub, TokenRequest({5, 6}, 2)).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Lists services through grpc.reflection.v1alpha; returns the raw response
// bytes (service names appear in them verbatim), or "" on failure.
std::string ReflectionListServices(const std::string& address) {
  class Reactor : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
   public:
    explicit Reactor(grpc::ClientContext* context) : context_(context) {}
    void Start(grpc::GenericStub& stub) {
      stub.PrepareBidiStreamingCall(
          context_, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
          grpc::StubOptions(), this);
      // ServerReflectionRequest{list_services: ""}: field 7, length 0.
      const char request_bytes[] = {0x3a, 0x00};
      grpc::Slice slice(request_bytes, sizeof(request_bytes));
      request_ = grpc::ByteBuffer(&slice, 1);
      StartWrite(&request_);
      StartRead(&response_);
      StartCall();
    }
    void OnWriteDone(bool ok) override { StartWritesDone(); }
    void OnReadDone(bool ok) override {
      if (ok) {
        std::vector<grpc::Slice> slices;
        if (response_.Dump(&slices).ok()) {
          for (const grpc::Slice& slice : slices) bytes_.append(slice.begin(), slice.end());
        }
      }
    }
    void OnDone(const grpc::Status& status) override { done_.set_value(bytes_); }
    std::future<std::string> result() { return done_.get_future(); }

   private:
    grpc::ClientContext* context_;
    grpc::ByteBuffer request_, response_;
    std::string bytes_;
    std::promise<std::string> done_;
  };
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  Reactor reactor(&context);
  std::future<std::string> result = reactor.result();
  reactor.Start(stub);
  return result.get();
}

TEST_F(ServerTest, ReflectionListsTheGenerationService) {
  const std::string services = ReflectionListServices(server_->address());
  EXPECT_TRUE(absl::StrContains(services, "pagoda.v1.Generation")) << services;
  EXPECT_TRUE(absl::StrContains(services, "grpc.health.v1.Health")) << services;
}

TEST_F(ServerTest, CliGeneratesStreamsAndReportsErrors) {
  const std::string cli = absl::StrCat(PAGODA_CLI_BINARY, " --server ", server_->address());
  const UnaryOutcome expected = Generate(*stub_, TokenRequest({5, 6, 7}, 4));
  ASSERT_TRUE(expected.status.ok());
  const std::string token_line =
      absl::StrCat("token_ids: ", absl::StrJoin(Tokens(expected.response), ","));
  for (const char* mode : {"", " --stream"}) {
    absl::StatusOr<std::string> out = RunCommand(
        absl::StrCat(cli, " generate --token-ids 5,6,7 --max-tokens 4 --ignore-eos", mode));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(absl::StrContains(*out, token_line)) << *out;
    EXPECT_TRUE(absl::StrContains(*out, "finish_reason: FINISH_REASON_LENGTH")) << *out;
  }
  absl::StatusOr<std::string> text =
      RunCommand(absl::StrCat(cli, " generate --prompt 'hello world' --max-tokens 3 --stream"));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(absl::StrContains(*text, "finish_reason: FINISH_REASON_")) << *text;
  absl::StatusOr<std::string> info = RunCommand(absl::StrCat(cli, " info"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(absl::StrContains(*info, "model_name: \"tiny\"")) << *info;
  absl::StatusOr<std::string> bad =
      RunCommand(absl::StrCat(cli, " generate --token-ids 5,999 2>&1; echo \"rc=$?\""));
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE(absl::StrContains(*bad, "prompt_token_ids[1]")) << *bad;
  EXPECT_TRUE(absl::StrContains(*bad, "rc=1")) << *bad;
}

TEST_F(ServerTest, BadModelDirIsOneClearErrorAndNonZeroExit) {
  absl::StatusOr<std::string> out = RunCommand(absl::StrCat(
      PAGODA_SERVER_BINARY, " --model=/nonexistent/model --port=0 2>&1; echo \"rc=$?\""));
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(absl::StrContains(*out, "rc=1")) << *out;
  EXPECT_TRUE(absl::StrContains(*out, "/nonexistent/model")) << *out;
  EXPECT_TRUE(absl::StrContains(*out, "pagoda-server:")) << *out;
}

}  // namespace
}  // namespace pagoda::testing
