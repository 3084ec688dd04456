#include "scheduler/api/request_validation.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"
#include "gtest/gtest.h"
#include "scheduler/api/constraint_compiler.h"
#include "scheduler/api/openai_protocol.h"
#include "tests/support/tiny_model.h"

namespace pagoda::scheduler {
namespace {

using pagoda::v1::GenerateRequest;

constexpr int kVocab = 100;
constexpr int kMaxModelLen = 64;

GenerateRequest TokenRequest(std::initializer_list<int> ids) {
  GenerateRequest request;
  for (int id : ids) request.add_prompt_token_ids(id);
  return request;
}

class RequestValidationTest : public ::testing::Test {
 protected:
  RequestValidationTest() : validator_({kVocab, kMaxModelLen, 1}, nullptr, 7) {}

  // Expects INVALID_ARGUMENT whose message starts with `field`.
  void ExpectInvalid(const GenerateRequest& request, const std::string& field) {
    absl::StatusOr<ValidatedRequest> result = validator_.Validate(request);
    ASSERT_FALSE(result.ok()) << field;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_EQ(result.status().message().substr(0, field.size()), field) << result.status();
  }

  RequestValidator validator_;
};

TEST_F(RequestValidationTest, FillsDefaults) {
  GenerateRequest request = TokenRequest({5, 6, 7});
  absl::StatusOr<ValidatedRequest> result = validator_.Validate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->prompt_token_ids, std::vector<int32_t>({5, 6, 7}));
  EXPECT_EQ(result->sampling.temperature, 0.0f);
  EXPECT_EQ(result->sampling.top_k, 0);
  EXPECT_EQ(result->sampling.top_p, 1.0f);
  EXPECT_EQ(result->sampling.n, 1);
  EXPECT_NE(result->sampling.seed, 0u);
  EXPECT_EQ(result->stopping.max_tokens, 16);
  EXPECT_FALSE(result->request_id.empty());
}

TEST_F(RequestValidationTest, KeepsClientValues) {
  GenerateRequest request = TokenRequest({5});
  request.set_request_id("mine");
  request.mutable_sampling()->set_temperature(0.7f);
  request.mutable_sampling()->set_top_k(5);
  request.mutable_sampling()->set_top_p(0.9f);
  request.mutable_sampling()->set_seed(42);
  request.mutable_stopping()->set_max_tokens(3);
  request.mutable_stopping()->set_min_tokens(2);
  request.mutable_stopping()->add_stop_token_ids(9);
  request.mutable_stopping()->set_ignore_eos(true);
  request.set_logprobs(4);
  absl::StatusOr<ValidatedRequest> result = validator_.Validate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->request_id, "mine");
  EXPECT_FLOAT_EQ(result->sampling.temperature, 0.7f);
  EXPECT_EQ(result->sampling.top_k, 5);
  EXPECT_FLOAT_EQ(result->sampling.top_p, 0.9f);
  EXPECT_EQ(result->sampling.seed, 42u);
  EXPECT_EQ(result->sampling.num_logprobs, 4);
  EXPECT_EQ(result->stopping.max_tokens, 3);
  EXPECT_EQ(result->stopping.min_tokens, 2);
  EXPECT_EQ(result->stopping.stop_token_ids, std::vector<int32_t>({9}));
  EXPECT_TRUE(result->stopping.ignore_eos);
}

TEST_F(RequestValidationTest, PromptLogprobsUnsetIsNoneAndZeroIsTheTokensOwn) {
  absl::StatusOr<ValidatedRequest> unset = validator_.Validate(TokenRequest({5, 6}));
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->sampling.wants_prompt_logprobs());
  GenerateRequest request = TokenRequest({5, 6});
  request.set_prompt_logprobs(0);
  absl::StatusOr<ValidatedRequest> zero = validator_.Validate(request);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->sampling.num_prompt_logprobs, 0);
  request.set_prompt_logprobs(20);
  absl::StatusOr<ValidatedRequest> most = validator_.Validate(request);
  ASSERT_TRUE(most.ok()) << most.status();
  EXPECT_EQ(most->sampling.num_prompt_logprobs, 20);
}

TEST_F(RequestValidationTest, ServerPicksDistinctSeedsAndIds) {
  absl::StatusOr<ValidatedRequest> a = validator_.Validate(TokenRequest({1}));
  absl::StatusOr<ValidatedRequest> b = validator_.Validate(TokenRequest({1}));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->sampling.seed, b->sampling.seed);
  EXPECT_NE(a->request_id, b->request_id);
  // Same --seed, same sequence of picks.
  RequestValidator again({kVocab, kMaxModelLen, 1}, nullptr, 7);
  absl::StatusOr<ValidatedRequest> c = again.Validate(TokenRequest({1}));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(a->sampling.seed, c->sampling.seed);
  // But not the same ids: a restarted server (same --seed) must not hand out
  // its predecessor's ids (OpenAI's cmpl-<id>) again.
  EXPECT_NE(a->request_id, c->request_id);
  EXPECT_TRUE(absl::StartsWith(c->request_id, "req-0-")) << c->request_id;
}

TEST_F(RequestValidationTest, RejectsBadPrompts) {
  ExpectInvalid(GenerateRequest(), "prompt");
  GenerateRequest both = TokenRequest({1});
  both.set_prompt("hello");
  ExpectInvalid(both, "prompt");
  ExpectInvalid(TokenRequest({1, kVocab}), "prompt_token_ids[1]");
  ExpectInvalid(TokenRequest({-1}), "prompt_token_ids[0]");
  GenerateRequest too_long;
  for (int i = 0; i < kMaxModelLen + 1; ++i) too_long.add_prompt_token_ids(3);
  ExpectInvalid(too_long, "prompt");
  GenerateRequest text;
  text.set_prompt("hello");
  ExpectInvalid(text, "prompt");  // No tokenizer.
}

TEST_F(RequestValidationTest, PromptAtMaxModelLenIsAllowed) {
  GenerateRequest request;
  for (int i = 0; i < kMaxModelLen; ++i) request.add_prompt_token_ids(3);
  request.mutable_stopping()->set_max_tokens(100);  // Will end with LENGTH.
  EXPECT_TRUE(validator_.Validate(request).ok());
}

TEST_F(RequestValidationTest, RejectsBadSamplingAndStopping) {
  auto with = [](auto mutate) {
    GenerateRequest request = TokenRequest({1, 2});
    mutate(request);
    return request;
  };
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_temperature(-0.5f); }),
                "sampling.temperature");
  ExpectInvalid(with([](auto& r) {
                  r.mutable_sampling()->set_temperature(std::numeric_limits<float>::quiet_NaN());
                }),
                "sampling.temperature");
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_top_p(1.5f); }), "sampling.top_p");
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_top_p(-0.1f); }), "sampling.top_p");
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_top_k(-1); }), "sampling.top_k");
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_n(-1); }), "sampling.n");
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_best_of(-2); }), "sampling.best_of");
  ExpectInvalid(with([](auto& r) { r.set_logprobs(21); }), "logprobs");
  ExpectInvalid(with([](auto& r) { r.set_logprobs(-1); }), "logprobs");
  ExpectInvalid(with([](auto& r) { r.set_prompt_logprobs(21); }), "prompt_logprobs");
  ExpectInvalid(with([](auto& r) { r.set_prompt_logprobs(-1); }), "prompt_logprobs");
  ExpectInvalid(with([](auto& r) { r.mutable_stopping()->set_max_tokens(-1); }),
                "stopping.max_tokens");
  ExpectInvalid(with([](auto& r) { r.mutable_stopping()->set_min_tokens(-1); }),
                "stopping.min_tokens");
  ExpectInvalid(with([](auto& r) { r.mutable_stopping()->set_min_tokens(17); }),  // > 16 default
                "stopping.min_tokens");
  ExpectInvalid(with([](auto& r) { r.mutable_stopping()->add_stop_token_ids(kVocab); }),
                "stopping.stop_token_ids[0]");
}

TEST_F(RequestValidationTest, SeveralSequencesGetDefaultsAndBounds) {
  GenerateRequest sampled = TokenRequest({1});
  sampled.mutable_sampling()->set_temperature(0.8f);
  sampled.mutable_sampling()->set_n(3);
  absl::StatusOr<ValidatedRequest> result = validator_.Validate(sampled);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->sampling.n, 3);
  EXPECT_EQ(result->sampling.best_of, 3);  // 0 = n.
  EXPECT_FALSE(result->sampling.use_beam_search);

  GenerateRequest beam = TokenRequest({1});
  beam.mutable_sampling()->set_use_beam_search(true);
  beam.mutable_sampling()->set_best_of(10);
  beam.mutable_sampling()->set_n(2);
  beam.mutable_sampling()->set_early_stopping(true);
  result = validator_.Validate(beam);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->sampling.best_of, 10);
  EXPECT_EQ(result->sampling.n, 2);
  EXPECT_FLOAT_EQ(result->sampling.length_penalty, 1.0f);  // 0 = 1.
  EXPECT_TRUE(result->sampling.early_stopping);
}

TEST_F(RequestValidationTest, RejectsBadSeveralSequenceRequests) {
  auto with = [](auto mutate) {
    GenerateRequest request = TokenRequest({1, 2});
    request.mutable_sampling()->set_temperature(1.0f);
    mutate(request);
    return request;
  };
  auto beam = [&](auto mutate) {
    return with([&](GenerateRequest& r) {
      r.mutable_sampling()->set_temperature(0.0f);
      r.mutable_sampling()->set_use_beam_search(true);
      mutate(r);
    });
  };
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_n(33); }), "sampling.n");
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_best_of(33); }), "sampling.best_of");
  ExpectInvalid(with([](auto& r) {
                  r.mutable_sampling()->set_n(4);
                  r.mutable_sampling()->set_best_of(3);
                }),
                "sampling.best_of");
  ExpectInvalid(with([](auto& r) {
                  r.mutable_sampling()->set_temperature(0.0f);
                  r.mutable_sampling()->set_n(2);
                }),
                "sampling.best_of");  // Greedy samples would all be equal.
  ExpectInvalid(with([](auto& r) { r.mutable_sampling()->set_length_penalty(2.0f); }),
                "sampling.length_penalty");  // Without beam search.
  ExpectInvalid(beam([](auto& r) { r.mutable_sampling()->set_best_of(11); }), "sampling.best_of");
  ExpectInvalid(beam([](auto& r) { r.mutable_sampling()->set_temperature(0.5f); }),
                "sampling.use_beam_search");
  ExpectInvalid(beam([](auto& r) { r.mutable_sampling()->set_top_k(5); }),
                "sampling.use_beam_search");
  ExpectInvalid(beam([](auto& r) { r.mutable_sampling()->set_length_penalty(11.0f); }),
                "sampling.length_penalty");
  ExpectInvalid(beam([](auto& r) {
                  r.mutable_sampling()->set_length_penalty(std::numeric_limits<float>::infinity());
                }),
                "sampling.length_penalty");
}

TEST(RequestValidationTokenizerTest, EncodesTextWithBos) {
  const std::string dir = pagoda::testing::TempPath("pagoda_validation");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      pagoda::testing::MakeTinyTokenizer(dir, 256);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  RequestValidator validator({256, 64, 1}, tokenizer->get(), 1);
  GenerateRequest request;
  request.set_prompt("hello world");
  absl::StatusOr<ValidatedRequest> result = validator.Validate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  absl::StatusOr<std::vector<int>> expected = (*tokenizer)->Encode("hello world");
  ASSERT_TRUE(expected.ok());
  ASSERT_EQ(result->prompt_token_ids.size(), expected->size() + 1);
  EXPECT_EQ(result->prompt_token_ids[0], 1);
  for (size_t i = 0; i < expected->size(); ++i) {
    EXPECT_EQ(result->prompt_token_ids[i + 1], (*expected)[i]);
  }
  std::filesystem::remove_all(dir);
}

TEST_F(RequestValidationTest, HostileSizesAreRefusedBeforeAnyWork) {
  GenerateRequest long_id = TokenRequest({5});
  long_id.set_request_id(std::string(kMaxRequestIdBytes + 1, 'x'));
  ExpectInvalid(long_id, "request_id");
  long_id.set_request_id(std::string(kMaxRequestIdBytes, 'x'));
  EXPECT_TRUE(validator_.Validate(long_id).ok());

  // Without a tokenizer, a text prompt is refused only after the byte bound:
  // the bound comes first, so no tokenizer is ever asked.
  GenerateRequest long_text;
  long_text.set_prompt(std::string(MaxPromptBytes(validator_.limits()) + 1, 'a'));
  absl::StatusOr<ValidatedRequest> refused = validator_.Validate(long_text);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "cannot fit max_model_len"))
      << refused.status();

  GenerateRequest many_ids;
  for (int i = 0; i < kMaxModelLen + 1; ++i) many_ids.add_prompt_token_ids(5);
  ExpectInvalid(many_ids, "prompt");

  GenerateRequest many_stops = TokenRequest({5});
  for (int i = 0; i <= kMaxStopTokenIds; ++i) many_stops.mutable_stopping()->add_stop_token_ids(3);
  ExpectInvalid(many_stops, "stopping.stop_token_ids");

  EXPECT_GE(MaxRequestBytes(validator_.limits()), MaxPromptBytes(validator_.limits()));
}

TEST_F(RequestValidationTest, NonFiniteSamplingValuesAreRefused) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    GenerateRequest temperature = TokenRequest({5});
    temperature.mutable_sampling()->set_temperature(bad);
    ExpectInvalid(temperature, "sampling.temperature");
    GenerateRequest top_p = TokenRequest({5});
    top_p.mutable_sampling()->set_top_p(bad);
    ExpectInvalid(top_p, "sampling.top_p");
    GenerateRequest penalty = TokenRequest({5});
    penalty.mutable_sampling()->set_length_penalty(bad);
    ExpectInvalid(penalty, "sampling.length_penalty");
  }
}

TEST_F(RequestValidationTest, KeepsLogitsProcessingValues) {
  GenerateRequest request = TokenRequest({1, 2});
  auto* sampling = request.mutable_sampling();
  sampling->set_presence_penalty(0.5f);
  sampling->set_frequency_penalty(-2.0f);
  sampling->set_repetition_penalty(1.3f);
  sampling->set_min_p(0.05f);
  (*sampling->mutable_logit_bias())[9] = -100.0f;
  (*sampling->mutable_logit_bias())[3] = 2.5f;
  sampling->add_allowed_token_ids(7);
  sampling->add_allowed_token_ids(3);
  sampling->add_allowed_token_ids(7);
  absl::StatusOr<ValidatedRequest> result = validator_.Validate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->sampling.presence_penalty, 0.5f);
  EXPECT_EQ(result->sampling.frequency_penalty, -2.0f);
  EXPECT_EQ(result->sampling.repetition_penalty, 1.3f);
  EXPECT_EQ(result->sampling.min_p, 0.05f);
  EXPECT_EQ(result->sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{3, 2.5f}, {9, -100.0f}}));
  EXPECT_EQ(result->sampling.allowed_token_ids, (std::vector<int32_t>{3, 7}));
  // 0 is off, as 1.
  request.mutable_sampling()->set_repetition_penalty(0.0f);
  result = validator_.Validate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->sampling.repetition_penalty, 1.0f);
}

TEST_F(RequestValidationTest, RejectsBadLogitsProcessing) {
  auto with = [](auto mutate) {
    GenerateRequest request = TokenRequest({1, 2});
    mutate(*request.mutable_sampling());
    return request;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid(with([](auto& s) { s.set_presence_penalty(2.5f); }), "sampling.presence_penalty");
  ExpectInvalid(with([&](auto& s) { s.set_presence_penalty(nan); }), "sampling.presence_penalty");
  ExpectInvalid(with([](auto& s) { s.set_frequency_penalty(-2.01f); }),
                "sampling.frequency_penalty");
  ExpectInvalid(with([](auto& s) { s.set_repetition_penalty(-1.0f); }),
                "sampling.repetition_penalty");
  ExpectInvalid(with([](auto& s) { s.set_repetition_penalty(0.001f); }),
                "sampling.repetition_penalty");
  ExpectInvalid(with([](auto& s) { s.set_repetition_penalty(2.5f); }),
                "sampling.repetition_penalty");
  ExpectInvalid(with([&](auto& s) { s.set_repetition_penalty(nan); }),
                "sampling.repetition_penalty");
  ExpectInvalid(with([](auto& s) { s.set_min_p(1.1f); }), "sampling.min_p");
  ExpectInvalid(with([](auto& s) { s.set_min_p(-0.1f); }), "sampling.min_p");
  ExpectInvalid(with([](auto& s) { (*s.mutable_logit_bias())[kVocab] = 1.0f; }),
                "sampling.logit_bias[100]");
  ExpectInvalid(with([](auto& s) { (*s.mutable_logit_bias())[-1] = 1.0f; }),
                "sampling.logit_bias[-1]");
  ExpectInvalid(with([](auto& s) { (*s.mutable_logit_bias())[5] = 100.5f; }),
                "sampling.logit_bias[5]");
  ExpectInvalid(with([&](auto& s) { (*s.mutable_logit_bias())[5] = nan; }),
                "sampling.logit_bias[5]");
  ExpectInvalid(with([](auto& s) {
                  for (int i = 0; i <= kMaxLogitBiasEntries; ++i) (*s.mutable_logit_bias())[i] = 1;
                }),
                "sampling.logit_bias");
  ExpectInvalid(with([](auto& s) { s.add_allowed_token_ids(kVocab); }),
                "sampling.allowed_token_ids[0]");
  ExpectInvalid(with([](auto& s) {
                  for (int i = 0; i <= kVocab; ++i) s.add_allowed_token_ids(0);
                }),
                "sampling.allowed_token_ids");
  // Bad words need a tokenizer; this validator has none.
  ExpectInvalid(with([](auto& s) { s.add_bad_words("foo"); }), "sampling.bad_words");
  ExpectInvalid(with([](auto& s) {
                  for (int i = 0; i <= kMaxBadWords; ++i) s.add_bad_words("x");
                }),
                "sampling.bad_words");
  ExpectInvalid(with([](auto& s) { s.add_bad_words(std::string(kMaxBadWordBytes + 1, 'x')); }),
                "sampling.bad_words[0]");
  ExpectInvalid(with([](auto& s) {
                  s.set_use_beam_search(true);
                  s.set_best_of(2);
                  s.set_presence_penalty(1.0f);
                }),
                "sampling.use_beam_search");
}

TEST(RequestValidationTokenizerTest, TokenizesBadWordsAsVllm) {
  const std::string dir = pagoda::testing::TempPath("pagoda_bad_words");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      pagoda::testing::MakeTinyTokenizer(dir, 256);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  RequestValidator validator({256, 64, 1}, tokenizer->get(), 1);
  GenerateRequest request;
  request.add_prompt_token_ids(5);
  request.mutable_sampling()->add_bad_words(" hello world");
  absl::StatusOr<ValidatedRequest> result = validator.Validate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  // Without the leading space first; with it only when it makes a different
  // first token of the same length.
  absl::StatusOr<std::vector<int>> bare = (*tokenizer)->Encode("hello world");
  absl::StatusOr<std::vector<int>> spaced = (*tokenizer)->Encode(" hello world");
  ASSERT_TRUE(bare.ok() && spaced.ok());
  std::vector<std::vector<int32_t>> expected = {{bare->begin(), bare->end()}};
  if (spaced->size() == bare->size() && spaced->front() != bare->front()) {
    expected.emplace_back(spaced->begin(), spaced->end());
  }
  EXPECT_EQ(result->sampling.bad_words_token_ids, expected);
  request.mutable_sampling()->set_bad_words(0, "   ");
  EXPECT_EQ(validator.Validate(request).status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

TEST(RequestValidationDefaultsTest, ModelDefaultsFillOnlyUnsetFields) {
  ModelLimits limits{kVocab, kMaxModelLen, 1};
  limits.defaults.temperature = 0.6f;
  limits.defaults.top_k = 20;
  limits.defaults.top_p = 0.9f;
  limits.defaults.min_p = 0.05f;
  limits.defaults.repetition_penalty = 1.05f;
  RequestValidator validator(limits, nullptr, 1);
  GenerateRequest request = TokenRequest({1, 2});
  absl::StatusOr<ValidatedRequest> unset = validator.Validate(request);
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_EQ(unset->sampling.temperature, 0.6f);
  EXPECT_EQ(unset->sampling.top_k, 20);
  EXPECT_EQ(unset->sampling.top_p, 0.9f);
  EXPECT_EQ(unset->sampling.min_p, 0.05f);
  EXPECT_EQ(unset->sampling.repetition_penalty, 1.05f);
  // Explicit values win, zeros included (temperature 0 = greedy, as vLLM).
  auto* sampling = request.mutable_sampling();
  sampling->set_temperature(0.0f);
  sampling->set_top_k(0);
  sampling->set_top_p(1.0f);
  sampling->set_min_p(0.0f);
  sampling->set_repetition_penalty(1.0f);
  absl::StatusOr<ValidatedRequest> set = validator.Validate(request);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->sampling.temperature, 0.0f);
  EXPECT_EQ(set->sampling.top_k, 0);
  EXPECT_EQ(set->sampling.top_p, 1.0f);
  EXPECT_EQ(set->sampling.min_p, 0.0f);
  EXPECT_EQ(set->sampling.repetition_penalty, 1.0f);
  // Beams are not sampled: the defaults do not apply to beam search.
  GenerateRequest beam = TokenRequest({1, 2});
  beam.mutable_sampling()->set_use_beam_search(true);
  beam.mutable_sampling()->set_best_of(2);
  absl::StatusOr<ValidatedRequest> beams = validator.Validate(beam);
  ASSERT_TRUE(beams.ok()) << beams.status();
  EXPECT_EQ(beams->sampling.temperature, 0.0f);
  EXPECT_EQ(beams->sampling.repetition_penalty, 1.0f);
}

// vLLM's override_max_tokens: whatever a request asks, through any door.
TEST(RequestValidationDefaultsTest, TheGenerationConfigsCapBoundsEveryRequest) {
  ModelLimits limits{kVocab, kMaxModelLen, 1};
  limits.defaults.max_tokens_cap = 5;
  RequestValidator validator(limits, nullptr, 1);
  const auto max_tokens = [&](int asked) {
    GenerateRequest request = TokenRequest({1, 2});
    request.mutable_stopping()->set_max_tokens(asked);
    absl::StatusOr<ValidatedRequest> validated = validator.Validate(request);
    EXPECT_TRUE(validated.ok()) << validated.status();
    return validated.ok() ? validated->stopping.max_tokens : -1;
  };
  EXPECT_EQ(max_tokens(0), 5);  // gRPC's default, 16.
  EXPECT_EQ(max_tokens(4), 4);
  EXPECT_EQ(max_tokens(5), 5);
  EXPECT_EQ(max_tokens(1000), 5);
  GenerateRequest beam = TokenRequest({1, 2});
  beam.mutable_sampling()->set_use_beam_search(true);
  beam.mutable_sampling()->set_best_of(2);
  beam.mutable_stopping()->set_max_tokens(9);
  EXPECT_EQ(validator.Validate(beam)->stopping.max_tokens, 5);
  // min_tokens is held to the capped budget, as vLLM's SamplingParams is.
  GenerateRequest too_many = TokenRequest({1, 2});
  too_many.mutable_stopping()->set_max_tokens(20);
  too_many.mutable_stopping()->set_min_tokens(8);
  EXPECT_EQ(validator.Validate(too_many).status().message(),
            "stopping.min_tokens: must be in [0, max_tokens = 5], got 8");
}

}  // namespace
}  // namespace pagoda::scheduler

namespace pagoda::scheduler {
namespace {

TEST_F(RequestValidationTest, PriorityIsBoundedAndKept) {
  for (int priority : {-kMaxPriorityMagnitude, -3, 0, 7, kMaxPriorityMagnitude}) {
    GenerateRequest request = TokenRequest({5});
    request.set_priority(priority);
    absl::StatusOr<ValidatedRequest> result = validator_.Validate(request);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->priority, priority);
  }
  for (int priority : {-kMaxPriorityMagnitude - 1, kMaxPriorityMagnitude + 1,
                       std::numeric_limits<int32_t>::min()}) {
    GenerateRequest request = TokenRequest({5});
    request.set_priority(priority);
    ExpectInvalid(request, "priority");
  }
}

TEST(RequestValidationConstraintTest, CompilesOrRefusesConstraintsNamingTheField) {
  std::vector<std::optional<std::string>> bytes(kVocab);
  for (int id = 3; id < kVocab; ++id) bytes[id] = std::string(1, static_cast<char>(' ' + id - 3));
  ModelLimits limits{kVocab, kMaxModelLen, 1};
  limits.token_vocabulary = *constraints::TokenVocabulary::Create(bytes, kVocab);
  RequestValidator validator(limits, nullptr, 7);
  auto expect_invalid = [&](const GenerateRequest& request, const std::string& field) {
    absl::StatusOr<ValidatedRequest> result = validator.Validate(request);
    ASSERT_FALSE(result.ok()) << field;
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(result.status().message().substr(0, field.size()), field) << result.status();
  };
  GenerateRequest request = TokenRequest({5});
  request.set_json_schema(R"({"type": "integer"})");
  absl::StatusOr<ValidatedRequest> ok = validator.Validate(request);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_NE(ok->sampling.grammar, nullptr);
  // The same text again is the cached grammar.
  EXPECT_EQ(validator.Validate(request)->sampling.grammar, ok->sampling.grammar);

  request.set_json_schema(R"({"type": "integer", "multipleOf": 2})");
  expect_invalid(request, "json_schema: at /: keyword \"multipleOf\"");
  request.set_json_schema("{not json");
  expect_invalid(request, "json_schema: not valid JSON");
  request.set_json_schema(std::string(kMaxConstraintTextBytes + 1, ' '));
  expect_invalid(request, "json_schema: ");
  request.set_regex("a(?=b)");
  expect_invalid(request, "regex: ");
  request.mutable_choice();
  expect_invalid(request, "choice: needs 1 to");
  request.mutable_choice()->add_choices("yes");
  ASSERT_TRUE(validator.Validate(request).ok());
  request.mutable_stopping()->set_ignore_eos(true);
  expect_invalid(request, "stopping.ignore_eos");
  request.mutable_stopping()->set_ignore_eos(false);
  request.mutable_sampling()->add_allowed_token_ids(4);
  expect_invalid(request, "sampling.allowed_token_ids");
  request.mutable_sampling()->clear_allowed_token_ids();
  // Beam search takes a constraint; every other rule of both still holds.
  request.mutable_sampling()->set_use_beam_search(true);
  request.mutable_sampling()->set_best_of(2);
  absl::StatusOr<ValidatedRequest> beams = validator.Validate(request);
  ASSERT_TRUE(beams.ok()) << beams.status();
  EXPECT_TRUE(beams->sampling.use_beam_search);
  EXPECT_EQ(beams->sampling.best_of, 2);
  EXPECT_NE(beams->sampling.grammar, nullptr);
  request.mutable_stopping()->set_ignore_eos(true);
  expect_invalid(request, "stopping.ignore_eos");
  request.mutable_stopping()->set_ignore_eos(false);
  request.mutable_sampling()->add_allowed_token_ids(4);  // Beam search refuses it first.
  expect_invalid(request, "sampling.use_beam_search");
  request.mutable_sampling()->clear_allowed_token_ids();
  request.mutable_sampling()->set_temperature(0.5f);
  expect_invalid(request, "sampling.use_beam_search");
  request.mutable_sampling()->clear_temperature();
  request.mutable_sampling()->set_best_of(11);
  expect_invalid(request, "sampling.best_of");
  request.mutable_sampling()->set_best_of(2);
  request.mutable_sampling()->set_presence_penalty(0.5f);
  expect_invalid(request, "sampling.use_beam_search");
  request.mutable_sampling()->clear_presence_penalty();
  request.set_regex("a(?=b)");
  expect_invalid(request, "regex: ");
  request.set_json_object(false);  // False: no constraint.
  EXPECT_TRUE(validator.Validate(request).ok());
  // A constraint that waits for a token (a reasoning model's </think>).
  request.set_constraint_after_token_id(4);
  expect_invalid(request, "constraint_after_token_id: needs a constraint");
  request.mutable_sampling()->set_use_beam_search(false);
  request.mutable_sampling()->clear_best_of();
  request.mutable_choice()->add_choices("yes");
  absl::StatusOr<ValidatedRequest> waits = validator.Validate(request);
  ASSERT_TRUE(waits.ok()) << waits.status();
  EXPECT_EQ(waits->sampling.grammar_after_token, 4);
  EXPECT_EQ(validator.Validate(TokenRequest({5}))->sampling.grammar_after_token, -1);
  request.set_constraint_after_token_id(kVocab);
  expect_invalid(request, "constraint_after_token_id: must be in [0, ");
  request.set_constraint_after_token_id(-1);
  expect_invalid(request, "constraint_after_token_id: must be in [0, ");
  request.clear_constraint_after_token_id();

  // A model whose tokenizer cannot list its tokens' bytes takes none.
  RequestValidator without({kVocab, kMaxModelLen, 1}, nullptr, 7);
  GenerateRequest regex = TokenRequest({5});
  regex.set_regex("a+");
  absl::StatusOr<ValidatedRequest> refused = without.Validate(regex);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message().substr(0, 6), "regex:");
}

// The automaton bounds a compiler is given (the fuzzer's are smaller) hold
// for every grammar it builds.
TEST(RequestValidationConstraintTest, ACompilersAutomatonLimitsBoundItsGrammars) {
  std::vector<std::optional<std::string>> bytes(kVocab);
  for (int id = 3; id < kVocab; ++id) bytes[id] = std::string(1, static_cast<char>(' ' + id - 3));
  auto vocabulary = *constraints::TokenVocabulary::Create(bytes, kVocab);
  GenerateRequest request = TokenRequest({5});
  request.set_regex("[ab]*a[ab]{6}");  // 2^7 DFA states.
  ConstraintCompiler service_bounds(vocabulary);
  EXPECT_TRUE(service_bounds.Compile(request).ok());
  constraints::AutomatonLimits limits;
  limits.max_dfa_states = 64;
  ConstraintCompiler tight(vocabulary, 0, absl::Milliseconds(1), limits);
  absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> refused =
      tight.Compile(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("too complex"), std::string::npos) << refused.status();
  request.set_regex("[ab]*a[ab]{3}");
  EXPECT_TRUE(tight.Compile(request).ok());
}

// One validation for every front door: a sampling field out of its range is
// refused over OpenAI HTTP exactly when it is over gRPC, naming the same
// field; where both reach the validator, with the same message.
TEST(OneValidationTest, HttpAndGrpcRefuseTheSameValues) {
  RequestValidator validator({kVocab, kMaxModelLen, 1}, nullptr, 7);
  struct Case {
    const char* field;
    nlohmann::json value;
    void (*set)(pagoda::v1::SamplingParams&);
    bool same_message;
  } cases[] = {
      {"temperature", 5, [](auto& s) { s.set_temperature(5); }, true},
      {"temperature", -1, [](auto& s) { s.set_temperature(-1); }, true},
      {"top_p", 1.5, [](auto& s) { s.set_top_p(1.5f); }, true},
      {"top_p", 0.5, [](auto& s) { s.set_top_p(0.5f); }, true},
      {"n", 50, [](auto& s) { s.set_n(50); }, false},
      {"n", kMaxSequences, [](auto& s) { s.set_n(kMaxSequences); }, true},
      {"presence_penalty", 2.5, [](auto& s) { s.set_presence_penalty(2.5f); }, false},
      {"min_p", 1.5, [](auto& s) { s.set_min_p(1.5f); }, false},
  };
  for (const Case& c : cases) {
    nlohmann::json body = {{"prompt", {1, 2, 3}}, {"temperature", 1}};
    body[c.field] = c.value;
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(body, false, 16);
    const absl::Status http =
        parsed.ok() ? validator.Validate(parsed->generate).status() : parsed.status();
    GenerateRequest grpc = TokenRequest({1, 2, 3});
    grpc.mutable_sampling()->set_temperature(1);
    c.set(*grpc.mutable_sampling());
    const absl::Status direct = validator.Validate(grpc).status();
    SCOPED_TRACE(absl::StrCat(c.field, " = ", c.value.dump()));
    EXPECT_EQ(http.ok(), direct.ok()) << http << " / " << direct;
    if (http.ok()) continue;
    EXPECT_TRUE(absl::StrContains(http.message(), c.field)) << http;
    EXPECT_TRUE(absl::StrContains(direct.message(), c.field)) << direct;
    if (c.same_message) {
      EXPECT_EQ(http.message(), direct.message());
    }
  }
}

}  // namespace
}  // namespace pagoda::scheduler
