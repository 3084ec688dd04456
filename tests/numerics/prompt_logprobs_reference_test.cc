// Prompt logprobs end to end against the float64 NumPy reference: a real
// pagoda-server with its pagoda-worker on a tiny random model, with a token
// budget of 8 (--max-num-batched-tokens) so a prompt spans several chunked
// prefill steps, must return for each prompt token after the first the
// reference's log-probability under the raw logits of the row before, and
// a valid top-k there; with prefix caching on, a prompt already cached
// still gets every entry (the cache is skipped); a stream delivers them in
// order, chunk by chunk; bad values are refused.

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
using pagoda::v1::TokenLogprobs;

// f32 CPU forward against float64: the numerics test's tolerance, on logprobs.
constexpr double kTolerance = 2e-4;
constexpr int kTop = 5;

class PromptLogprobsReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_dir_ = new std::string(TempPath("pagoda_prompt_logprobs"));
    const absl::Status made = MakeTinyModel(*model_dir_, 29, TinyTokenizer::kNone);
    ASSERT_TRUE(made.ok()) << made;
    auto server = ServerProcess::Start(
        PAGODA_SERVER_BINARY,
        {absl::StrCat("--model=", *model_dir_), "--block-size=4", "--num-gpu-blocks-override=300",
         "--max-model-len=96", "--max-num-batched-tokens=8", "--max-num-seqs=4",
         "--enable-prefix-caching", "--metrics-port=-1", "--port=0"},
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

  // The reference's entries for `prompt`, with every token ranked.
  static nlohmann::json Reference(const std::vector<int32_t>& prompt) {
    absl::StatusOr<std::string> out = RunCommand(absl::StrCat(
        PythonBinary(), " tests/reference/llama_reference.py prompt-logprobs --model ",
        *model_dir_, " --tokens ", absl::StrJoin(prompt, ","), " --top ", kTinyModelVocab));
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? nlohmann::json::parse(*out) : nlohmann::json::array();
  }

  static GenerateRequest Scored(const std::vector<int32_t>& prompt, int top) {
    GenerateRequest request = TokenRequest(prompt, /*max_tokens=*/2);
    request.set_prompt_logprobs(top);
    return request;
  }

  static std::string* model_dir_;
  static ServerProcess* server_;
  std::unique_ptr<Generation::Stub> stub_;
};

std::string* PromptLogprobsReferenceTest::model_dir_ = nullptr;
ServerProcess* PromptLogprobsReferenceTest::server_ = nullptr;

// Each entry scores the next prompt token as the reference does, and its
// top list holds `top` tokens the reference ranks as high (up to the
// tolerance), each with the reference's logprob, in descending order.
void ExpectMatchesReference(const google::protobuf::RepeatedPtrField<TokenLogprobs>& got,
                            const std::vector<int32_t>& prompt, const nlohmann::json& reference,
                            int top) {
  ASSERT_EQ(got.size(), static_cast<int>(prompt.size()) - 1);
  ASSERT_EQ(reference.size(), prompt.size() - 1);
  for (int p = 0; p < got.size(); ++p) {
    SCOPED_TRACE(absl::StrCat("position ", p + 1));
    const nlohmann::json& expected = reference[p];
    std::vector<double> by_id(kTinyModelVocab);
    for (const auto& pair : expected["top"]) by_id[pair[0].get<int>()] = pair[1].get<double>();
    EXPECT_EQ(got[p].token_id(), prompt[p + 1]);
    EXPECT_NEAR(got[p].logprob(), expected["logprob"].get<double>(), kTolerance);
    ASSERT_EQ(got[p].top_size(), top);
    for (int i = 0; i < top; ++i) {
      EXPECT_NEAR(got[p].top(i).logprob(), by_id[got[p].top(i).token_id()], kTolerance);
      EXPECT_GE(by_id[got[p].top(i).token_id()] + kTolerance,
                expected["top"][i][1].get<double>());
      if (i > 0) {
        EXPECT_LE(got[p].top(i).logprob(), got[p].top(i - 1).logprob());
      }
    }
  }
}

TEST_F(PromptLogprobsReferenceTest, ChunkedPromptMatchesReference) {
  const std::vector<int32_t> prompt = TestPrompt(29, 3);  // 4 chunks of 8.
  const UnaryOutcome outcome = Generate(*stub_, Scored(prompt, kTop));
  ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
  ExpectMatchesReference(outcome.response.prompt_logprobs(), prompt, Reference(prompt), kTop);
  EXPECT_EQ(outcome.response.outputs(0).token_ids_size(), 2);
}

TEST_F(PromptLogprobsReferenceTest, ZeroTopGivesTheTokensOwnAndUnsetGivesNone) {
  const std::vector<int32_t> prompt = TestPrompt(11, 5);
  const UnaryOutcome zero = Generate(*stub_, Scored(prompt, 0));
  ASSERT_TRUE(zero.status.ok()) << zero.status.error_message();
  ExpectMatchesReference(zero.response.prompt_logprobs(), prompt, Reference(prompt), 0);
  const UnaryOutcome unset = Generate(*stub_, TokenRequest(prompt, 2));
  ASSERT_TRUE(unset.status.ok());
  EXPECT_EQ(unset.response.prompt_logprobs_size(), 0);
}

TEST_F(PromptLogprobsReferenceTest, CachedPromptIsRecomputedForItsLogprobs) {
  const std::vector<int32_t> prompt = TestPrompt(26, 8);
  // The first request caches the prompt's full blocks; the scored ones
  // must not reuse them (no logits there), and their own blocks repeat.
  ASSERT_TRUE(Generate(*stub_, TokenRequest(prompt, 2)).status.ok());
  const nlohmann::json reference = Reference(prompt);
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const UnaryOutcome outcome = Generate(*stub_, Scored(prompt, 2));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status.error_message();
    ExpectMatchesReference(outcome.response.prompt_logprobs(), prompt, reference, 2);
  }
}

TEST_F(PromptLogprobsReferenceTest, StreamDeliversThemInOrderChunkByChunk) {
  const std::vector<int32_t> prompt = TestPrompt(30, 11);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub_->GenerateStream(&context, Scored(prompt, kTop));
  GenerateResponse message;
  google::protobuf::RepeatedPtrField<TokenLogprobs> received;
  int messages_with_entries = 0;
  bool tokens_seen = false;
  while (reader->Read(&message)) {
    if (message.prompt_logprobs_size() > 0) {
      ++messages_with_entries;
      EXPECT_FALSE(tokens_seen) << "prompt logprobs after the first token";
    }
    for (const TokenLogprobs& entry : message.prompt_logprobs()) *received.Add() = entry;
    for (const auto& output : message.outputs()) tokens_seen |= output.token_ids_size() > 0;
  }
  ASSERT_TRUE(reader->Finish().ok());
  ExpectMatchesReference(received, prompt, Reference(prompt), kTop);
  EXPECT_GE(messages_with_entries, 3);  // 30 tokens, 8 a step.
}

TEST_F(PromptLogprobsReferenceTest, OutOfRangeIsInvalidArgument) {
  for (int bad : {-1, 21}) {
    const UnaryOutcome outcome = Generate(*stub_, Scored(TestPrompt(5, 1), bad));
    EXPECT_EQ(outcome.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(outcome.status.error_message().find("prompt_logprobs"), std::string::npos);
  }
}

}  // namespace
}  // namespace pagoda::testing
