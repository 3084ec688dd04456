// End to end KV sharing: real pagoda-server + pagoda-worker processes on a
// tiny random Llama model. Parallel sampling, beam search (against the
// float64 NumPy reference beam search), prefix caching and preemption under
// a KV pool far too small for the load.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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
constexpr int kBlockSize = 4;

GenerateRequest SampledRequest(const std::vector<int32_t>& prompt, int n, int best_of,
                               uint64_t seed) {
  GenerateRequest request = TokenRequest(prompt, 10);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_n(n);
  request.mutable_sampling()->set_best_of(best_of);
  request.mutable_sampling()->set_seed(seed);
  return request;
}

using TokenLists = std::vector<std::vector<int32_t>>;

// Output token lists by index (the index must equal the position).
TokenLists TokensByIndex(const GenerateResponse& response) {
  TokenLists lists;
  for (int i = 0; i < response.outputs_size(); ++i) {
    EXPECT_EQ(response.outputs(i).index(), i);
    lists.emplace_back(response.outputs(i).token_ids().begin(),
                       response.outputs(i).token_ids().end());
  }
  return lists;
}

// Streams the request and gathers each index's tokens in arrival order.
TokenLists StreamByIndex(Generation::Stub& stub, const GenerateRequest& request,
                         grpc::Status* status) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub.GenerateStream(&context, request);
  std::map<int, std::vector<int32_t>> by_index;
  GenerateResponse message;
  while (reader->Read(&message)) {
    for (const auto& output : message.outputs()) {
      auto& tokens = by_index[output.index()];
      tokens.insert(tokens.end(), output.token_ids().begin(), output.token_ids().end());
    }
  }
  *status = reader->Finish();
  TokenLists lists;
  for (auto& [index, tokens] : by_index) {
    EXPECT_EQ(index, static_cast<int>(lists.size()));
    lists.push_back(tokens);
  }
  return lists;
}

// Blocks are freed at the engine's next step: allow it a moment.
void ExpectAllBlocksFreeSoon(Generation::Stub& stub) {
  pagoda::v1::ModelInfo info;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  do {
    info = InfoOf(stub);
    if (info.free_gpu_blocks() == info.num_gpu_blocks() &&
        info.free_cpu_blocks() == info.num_cpu_blocks()) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  EXPECT_EQ(info.free_gpu_blocks(), info.num_gpu_blocks());
  EXPECT_EQ(info.free_cpu_blocks(), info.num_cpu_blocks());
}

class KvSharingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(TempPath("pagoda_kv_it"));
    const absl::Status made = MakeTinyModel(*model_dir_, /*seed=*/23);
    ASSERT_TRUE(made.ok()) << made;
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        StartServer({"--num-gpu-blocks-override=400"});
    ASSERT_TRUE(server.ok()) << server.status();
    roomy_ = server->release();
  }

  static void TearDownTestSuite() {
    delete roomy_;
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartServer(
      std::vector<std::string> extra) {
    std::vector<std::string> args = {
        absl::StrCat("--model=", *model_dir_),
        absl::StrCat("--block-size=", kBlockSize),
        absl::StrCat("--max-model-len=", kMaxModelLen),
        "--metrics-port=-1",
        "--seed=5",
        "--port=0",
    };
    args.insert(args.end(), extra.begin(), extra.end());
    return ServerProcess::Start(PAGODA_SERVER_BINARY, args, absl::Seconds(60));
  }

  static std::unique_ptr<Generation::Stub> Connect(const ServerProcess& server) {
    return Generation::NewStub(
        grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  }

  void SetUp() override {
    ASSERT_NE(roomy_, nullptr);
    stub_ = Connect(*roomy_);
  }

  // Runs a reference script with a JSON request file; returns its JSON answer.
  static nlohmann::json RunReference(const std::string& script, const std::string& command,
                                     const nlohmann::json& requests) {
    const std::string path = absl::StrCat(*model_dir_, "/requests_", script, ".json");
    std::ofstream(path) << requests.dump();
    absl::StatusOr<std::string> out =
        RunCommand(absl::StrCat(PythonBinary(), " tests/reference/", script, " ", command,
                                " --model ", *model_dir_, " --requests ", path));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? nlohmann::json::parse(*out) : nlohmann::json::array();
  }

  static TokenLists ReferenceGreedy(const TokenLists& prompts, int max_tokens) {
    nlohmann::json requests = nlohmann::json::array();
    for (const auto& prompt : prompts) {
      requests.push_back({{"tokens", prompt}, {"max_tokens", max_tokens}, {"ignore_eos", true}});
    }
    return RunReference("llama_reference.py", "generate-batch", requests).get<TokenLists>();
  }

  static std::string* model_dir_;
  static ServerProcess* roomy_;
  std::unique_ptr<Generation::Stub> stub_;
};

std::string* KvSharingTest::model_dir_ = nullptr;
ServerProcess* KvSharingTest::roomy_ = nullptr;

TEST_F(KvSharingTest, ParallelSamplingIsReproducibleSiblingsDifferAndStreamPerIndex) {
  const GenerateRequest request = SampledRequest(TestPrompt(9, 1), 4, 0, 1234);
  const UnaryOutcome first = Generate(*stub_, request);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  const TokenLists samples = TokensByIndex(first.response);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(std::set<std::vector<int32_t>>(samples.begin(), samples.end()).size(), 4u)
      << "siblings must draw from their own seeds";
  for (const auto& tokens : samples) EXPECT_EQ(tokens.size(), 10u);

  // Reproducible, alone or next to other traffic, unary or streamed.
  std::vector<std::future<UnaryOutcome>> noise;
  for (int i = 0; i < 3; ++i) {
    noise.push_back(std::async(std::launch::async, [&, i] {
      return Generate(*stub_, SampledRequest(TestPrompt(7, 10 + i), 2, 3, 99 + i));
    }));
  }
  EXPECT_EQ(TokensByIndex(Generate(*stub_, request).response), samples);
  grpc::Status status;
  EXPECT_EQ(StreamByIndex(*stub_, request, &status), samples);
  EXPECT_TRUE(status.ok()) << status.error_message();
  for (auto& result : noise) EXPECT_TRUE(result.get().status.ok());

  // best_of = 4, n = 2 draws the same four samples and returns the two with
  // the highest cumulative logprob, best first.
  const UnaryOutcome best = Generate(*stub_, SampledRequest(TestPrompt(9, 1), 2, 4, 1234));
  ASSERT_TRUE(best.status.ok()) << best.status.error_message();
  std::vector<std::pair<double, std::vector<int32_t>>> ranked;
  for (int i = 0; i < 4; ++i) {
    ranked.emplace_back(first.response.outputs(i).cumulative_logprob(), samples[i]);
  }
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  const TokenLists best_tokens = TokensByIndex(best.response);
  ASSERT_EQ(best_tokens.size(), 2u);
  EXPECT_EQ(best_tokens[0], ranked[0].second);
  EXPECT_EQ(best_tokens[1], ranked[1].second);
  EXPECT_NEAR(best.response.outputs(0).cumulative_logprob(), ranked[0].first, 1e-4);
  ExpectAllBlocksFreeSoon(*stub_);
}

struct BeamCase {
  int width;
  int n;
  int max_tokens;
  float length_penalty;
  bool early_stopping;
  bool ignore_eos;
  int prompt_len;
  // Stop ids: the greedy continuation's tokens at these positions, so that
  // hypotheses of different lengths finish and the length penalty and the
  // stopping rule decide.
  std::vector<int> stop_at;
};

TEST_F(KvSharingTest, BeamSearchEqualsTheNumpyReference) {
  const std::vector<BeamCase> cases = {
      {3, 3, 6, 1.0f, false, true, 7, {}},         {4, 2, 8, 0.5f, true, false, 5, {1, 3}},
      {2, 2, 7, 2.0f, false, false, 9, {2, 4}},    {5, 5, 4, 1.0f, false, true, 4, {}},
      {4, 4, 9, 0.25f, false, true, 6, {1, 2, 5}}, {3, 2, 8, -1.0f, true, true, 8, {0, 3}},
      {3, 3, 8, 4.0f, false, false, 2, {0, 2}},    {3, 3, 8, -3.0f, false, true, 1, {1, 2}},
  };
  TokenLists prompts;
  for (size_t i = 0; i < cases.size(); ++i)
    prompts.push_back(TestPrompt(cases[i].prompt_len, 40 + i));
  const TokenLists greedy = ReferenceGreedy(prompts, 10);
  std::vector<std::vector<int32_t>> stop_ids(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    for (int position : cases[i].stop_at) stop_ids[i].push_back(greedy[i][position]);
  }
  nlohmann::json requests = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    const BeamCase& c = cases[i];
    requests.push_back({{"tokens", TestPrompt(c.prompt_len, 40 + i)},
                        {"width", c.width},
                        {"n", c.n},
                        {"max_tokens", c.max_tokens},
                        {"length_penalty", c.length_penalty},
                        {"early_stopping", c.early_stopping},
                        {"ignore_eos", c.ignore_eos},
                        {"max_model_len", kMaxModelLen},
                        {"stop_token_ids", stop_ids[i]}});
  }
  const nlohmann::json expected = RunReference("beam_search_reference.py", "", requests);
  ASSERT_EQ(expected.size(), cases.size());
  int short_hypotheses = 0;  // Ended by a stop id before max_tokens.
  for (size_t i = 0; i < cases.size(); ++i) {
    for (const auto& beam : expected[i]) {
      if (static_cast<int>(beam["tokens"].size()) < cases[i].max_tokens) ++short_hypotheses;
    }
  }
  EXPECT_GE(short_hypotheses, 3) << "the cases must exercise finishing by a stop token";
  // All at once: beams of different requests share the batch.
  std::vector<std::future<UnaryOutcome>> results;
  for (size_t i = 0; i < cases.size(); ++i) {
    const BeamCase& c = cases[i];
    GenerateRequest request = TokenRequest(TestPrompt(c.prompt_len, 40 + i), c.max_tokens);
    request.mutable_stopping()->set_ignore_eos(c.ignore_eos);
    for (int32_t id : stop_ids[i]) request.mutable_stopping()->add_stop_token_ids(id);
    request.mutable_sampling()->set_use_beam_search(true);
    request.mutable_sampling()->set_best_of(c.width);
    request.mutable_sampling()->set_n(c.n);
    request.mutable_sampling()->set_length_penalty(c.length_penalty);
    request.mutable_sampling()->set_early_stopping(c.early_stopping);
    results.push_back(
        std::async(std::launch::async, [this, request] { return Generate(*stub_, request); }));
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const UnaryOutcome result = results[i].get();
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    const nlohmann::json& beams = expected[i];
    ASSERT_EQ(result.response.outputs_size(), static_cast<int>(beams.size())) << "case " << i;
    for (int b = 0; b < result.response.outputs_size(); ++b) {
      const auto& output = result.response.outputs(b);
      EXPECT_EQ(output.index(), b);
      EXPECT_EQ(std::vector<int32_t>(output.token_ids().begin(), output.token_ids().end()),
                beams[b]["tokens"].get<std::vector<int32_t>>())
          << "case " << i << " beam " << b;
      EXPECT_NEAR(output.cumulative_logprob(), beams[b]["cumulative_logprob"].get<double>(), 1e-3)
          << "case " << i << " beam " << b;
    }
  }
  ExpectAllBlocksFreeSoon(*stub_);
}

TEST_F(KvSharingTest, PrefixCacheComputesOnlyTheSuffixWithTheSameTokens) {
  auto cached = StartServer({"--num-gpu-blocks-override=200"});
  auto uncached = StartServer({"--num-gpu-blocks-override=200", "--no-enable-prefix-caching"});
  ASSERT_TRUE(cached.ok() && uncached.ok());
  const std::vector<int32_t> first = TestPrompt(61, 3);
  std::vector<int32_t> second(first.begin(), first.begin() + 56);
  for (int i = 0; i < 5; ++i) second.push_back(100 + i);
  const TokenLists expected = ReferenceGreedy({first, second}, 6);
  for (ServerProcess* server : {cached->get(), uncached->get()}) {
    const bool caching = server == cached->get();
    auto stub = Connect(*server);
    const int port = server->metrics_port();
    ASSERT_EQ(TokensByIndex(Generate(*stub, TokenRequest(first, 6)).response)[0], expected[0]);
    const double prompt_before = MetricValue(port, "pagoda_prompt_tokens_total");
    const double hits_before = MetricValue(port, "pagoda_prefix_cache_hits_total");
    EXPECT_EQ(prompt_before, 61);
    EXPECT_EQ(TokensByIndex(Generate(*stub, TokenRequest(second, 6)).response)[0], expected[1]);
    // 14 full blocks (56 tokens) are shared; the worker computes the other 5.
    EXPECT_EQ(MetricValue(port, "pagoda_prompt_tokens_total") - prompt_before, caching ? 5 : 61);
    EXPECT_EQ(MetricValue(port, "pagoda_prefix_cache_hits_total") - hits_before, caching ? 56 : 0);
    EXPECT_EQ(MetricValue(port, "pagoda_prefix_cache_queries_total"), caching ? 122 : 0);
    ExpectAllBlocksFreeSoon(*stub);
  }
}

class PreemptionTest : public KvSharingTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(PreemptionTest, TinyPoolGivesTheUnconstrainedTokensAndFreesEverything) {
  // 20 blocks of 4 tokens for 8 requests growing to 34 tokens (9 blocks) each.
  auto tight = StartServer({"--num-gpu-blocks-override=20", "--swap-space=0.001",
                            absl::StrCat("--preemption-mode=", GetParam())});
  ASSERT_TRUE(tight.ok()) << tight.status();
  auto stub = Connect(**tight);
  TokenLists prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(TestPrompt(8 + i % 3, 60 + i));
  const TokenLists expected = ReferenceGreedy(prompts, 24);
  // Two parallel-sampling groups too (swapped whole in auto mode): their
  // samples must equal those of the roomy server.
  const GenerateRequest sampled = SampledRequest(TestPrompt(6, 90), 2, 2, 77);
  const TokenLists sampled_expected = TokensByIndex(Generate(*stub_, sampled).response);

  std::vector<std::future<UnaryOutcome>> greedy;
  for (const auto& prompt : prompts) {
    greedy.push_back(std::async(
        std::launch::async, [&stub, prompt] { return Generate(*stub, TokenRequest(prompt, 24)); }));
  }
  std::vector<std::future<UnaryOutcome>> samples;
  for (int i = 0; i < 2; ++i) {
    samples.push_back(
        std::async(std::launch::async, [&stub, &sampled] { return Generate(*stub, sampled); }));
  }
  for (size_t i = 0; i < greedy.size(); ++i) {
    const UnaryOutcome result = greedy[i].get();
    ASSERT_TRUE(result.status.ok()) << result.status.error_message();
    EXPECT_EQ(TokensByIndex(result.response)[0], expected[i]) << "request " << i;
  }
  for (auto& result : samples) EXPECT_EQ(TokensByIndex(result.get().response), sampled_expected);

  const int port = (*tight)->metrics_port();
  EXPECT_GE(MetricValue(port, "pagoda_num_preemptions_total"), 5);
  EXPECT_EQ(MetricValue(port, "pagoda_request_preemptions_count"), 10);
  EXPECT_GE(MetricValue(port, "pagoda_request_preemptions_sum"), 5);
  ExpectAllBlocksFreeSoon(*stub);

  // A prompt that can never fit ends with a clear error, not silence.
  const UnaryOutcome too_big = Generate(*stub, TokenRequest(TestPrompt(90, 1), 4));
  EXPECT_EQ(too_big.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(too_big.status.error_message(), "can never be scheduled"))
      << too_big.status.error_message();
}

INSTANTIATE_TEST_SUITE_P(Modes, PreemptionTest, ::testing::Values("recompute", "swap", "auto"));

}  // namespace
}  // namespace pagoda::testing
