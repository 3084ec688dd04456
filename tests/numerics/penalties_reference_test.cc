// Logits processing end to end against the float64 NumPy reference: a real
// pagoda-server with its pagoda-worker on a tiny random model generates
// greedily with repetition, frequency and presence penalties and logit_bias
// over prompts that repeat tokens, and must give the tokens of
// tests/reference/llama_reference.py, which applies them in vLLM v1's order
// (bias, repetition over prompt and output, frequency x output count,
// presence) before its argmax. Alone (batch 1) and inside 32 mixed requests.

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
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
using pagoda::v1::Generation;

constexpr int kMaxTokens = 24;

// One request's logits processing; zero / empty = off.
struct Penalties {
  std::string name;
  float repetition = 0;
  float frequency = 0;
  float presence = 0;
  std::vector<std::pair<int32_t, float>> logit_bias;
};

std::vector<Penalties> Cases() {
  return {
      {.name = "repetition", .repetition = 1.6f},
      {.name = "repetition_below_one", .repetition = 0.6f},
      {.name = "frequency", .frequency = 1.5f},
      {.name = "presence", .presence = 1.8f},
      {.name = "frequency_and_presence", .frequency = 0.7f, .presence = 0.9f},
      {.name = "logit_bias", .logit_bias = {{40, 6.0f}, {41, -100.0f}, {200, 4.5f}}},
      {.name = "combined",
       .repetition = 1.3f,
       .frequency = 0.6f,
       .presence = 0.5f,
       .logit_bias = {{40, 3.0f}, {7, -2.0f}}},
  };
}

// A prompt of `length` tokens cycling through a few ids, so the prompt
// itself repeats tokens (what the repetition penalty looks at).
std::vector<int32_t> RepeatingPrompt(int length, int salt) {
  const int period = 2 + salt % 4;
  std::vector<int32_t> prompt;
  for (int i = 0; i < length; ++i) prompt.push_back(3 + ((i % period) * 37 + salt * 13) % 250);
  return prompt;
}

GenerateRequest PenalizedRequest(const std::vector<int32_t>& prompt, const Penalties& p) {
  GenerateRequest request = TokenRequest(prompt, kMaxTokens);
  auto* sampling = request.mutable_sampling();
  if (p.repetition != 0) sampling->set_repetition_penalty(p.repetition);
  sampling->set_frequency_penalty(p.frequency);
  sampling->set_presence_penalty(p.presence);
  for (const auto& [token, bias] : p.logit_bias) (*sampling->mutable_logit_bias())[token] = bias;
  return request;
}

nlohmann::json ReferenceRequest(const std::vector<int32_t>& prompt, const Penalties& p) {
  nlohmann::json bias = nlohmann::json::object();
  for (const auto& [token, value] : p.logit_bias) bias[std::to_string(token)] = value;
  return {{"tokens", prompt},
          {"max_tokens", kMaxTokens},
          {"ignore_eos", true},
          {"repetition_penalty", p.repetition == 0 ? 1.0f : p.repetition},
          {"frequency_penalty", p.frequency},
          {"presence_penalty", p.presence},
          {"logit_bias", bias}};
}

std::vector<int32_t> Tokens(const UnaryOutcome& outcome) {
  if (outcome.response.outputs_size() == 0) return {};
  const auto& ids = outcome.response.outputs(0).token_ids();
  return {ids.begin(), ids.end()};
}

class PenaltiesReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(TempPath("pagoda_penalties"));
    const absl::Status made = MakeTinyModel(*model_dir_, 23, TinyTokenizer::kNone);
    ASSERT_TRUE(made.ok()) << made;
    auto server = ServerProcess::Start(
        PAGODA_SERVER_BINARY,
        {absl::StrCat("--model=", *model_dir_), "--block-size=4", "--num-gpu-blocks-override=600",
         "--max-model-len=128", "--metrics-port=-1", "--port=0"},
        absl::Seconds(60));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }

  static void TearDownTestSuite() {
    delete server_;
    std::filesystem::remove_all(*model_dir_);
    delete model_dir_;
  }

  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    stub_ = Generation::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
  }

  // The reference's greedy tokens of each request (generate-batch).
  static std::vector<std::vector<int32_t>> Reference(const nlohmann::json& requests) {
    const std::string path = absl::StrCat(*model_dir_, "/requests.json");
    std::ofstream(path) << requests.dump();
    absl::StatusOr<std::string> out = RunCommand(
        absl::StrCat(PythonBinary(), " tests/reference/llama_reference.py generate-batch",
                     " --model ", *model_dir_, " --requests ", path));
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
    return nlohmann::json::parse(*out).get<std::vector<std::vector<int32_t>>>();
  }

  static std::string* model_dir_;
  static ServerProcess* server_;
  std::unique_ptr<Generation::Stub> stub_;
};

std::string* PenaltiesReferenceTest::model_dir_ = nullptr;
ServerProcess* PenaltiesReferenceTest::server_ = nullptr;

TEST_F(PenaltiesReferenceTest, AloneGreedyTokensMatchReference) {
  const std::vector<Penalties> cases = Cases();
  const std::vector<int32_t> prompt = RepeatingPrompt(14, 0);
  nlohmann::json requests = nlohmann::json::array();
  requests.push_back(ReferenceRequest(prompt, Penalties{}));
  for (const Penalties& p : cases) requests.push_back(ReferenceRequest(prompt, p));
  const std::vector<std::vector<int32_t>> reference = Reference(requests);
  ASSERT_EQ(reference.size(), cases.size() + 1);
  for (size_t i = 0; i < cases.size(); ++i) {
    // Each case must change the plain greedy output, or it would prove nothing.
    EXPECT_NE(reference[i + 1], reference[0]) << cases[i].name << " changes nothing";
    const UnaryOutcome outcome = Generate(*stub_, PenalizedRequest(prompt, cases[i]));
    ASSERT_TRUE(outcome.status.ok()) << cases[i].name << ": " << outcome.status.error_message();
    EXPECT_EQ(Tokens(outcome), reference[i + 1]) << cases[i].name;
  }
}

TEST_F(PenaltiesReferenceTest, InsideABatchOf32MixedRequestsTokensMatchReference) {
  constexpr int kRequests = 32;
  const std::vector<Penalties> cases = Cases();
  std::vector<GenerateRequest> requests;
  nlohmann::json reference_requests = nlohmann::json::array();
  for (int i = 0; i < kRequests; ++i) {
    // Every fourth request plain, the rest cycling through the cases, over
    // prompts of mixed lengths (several spanning many 4-token blocks).
    const Penalties p = i % 4 == 0 ? Penalties{} : cases[i % cases.size()];
    const std::vector<int32_t> prompt = RepeatingPrompt(i % 3 == 0 ? 30 + i : 3 + i % 11, i);
    requests.push_back(PenalizedRequest(prompt, p));
    reference_requests.push_back(ReferenceRequest(prompt, p));
  }
  // The same prompts without logits processing, after the batch's.
  for (int i = 0; i < kRequests; ++i) {
    nlohmann::json plain = reference_requests[i];
    plain.erase("logit_bias");
    plain["repetition_penalty"] = 1.0;
    plain["frequency_penalty"] = plain["presence_penalty"] = 0.0;
    reference_requests.push_back(plain);
  }
  const std::vector<std::vector<int32_t>> reference = Reference(reference_requests);
  ASSERT_EQ(reference.size(), static_cast<size_t>(2 * kRequests));
  // Most of the 24 processed requests (23 on this model) must differ from
  // their plain tokens, or the batch would not show the processing is kept
  // per sequence.
  int changed = 0;
  for (int i = 0; i < kRequests; ++i) changed += reference[i] != reference[kRequests + i];
  EXPECT_GE(changed, 20);
  std::vector<UnaryOutcome> outcomes(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] { outcomes[i] = Generate(*stub_, requests[i]); });
  }
  for (std::thread& client : clients) client.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_TRUE(outcomes[i].status.ok()) << i << ": " << outcomes[i].status.error_message();
    EXPECT_EQ(Tokens(outcomes[i]), reference[i]) << "request " << i;
  }
}

}  // namespace
}  // namespace pagoda::testing
