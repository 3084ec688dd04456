// --speculative-config: vLLM's keys and defaults accepted, every bad input
// refused with one line that names it.

#include "scheduler/spec/speculative_config.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

TEST(SpeculativeConfigTest, NgramWithItsBounds) {
  auto config = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5,
          "prompt_lookup_min": 2, "disable_by_batch_size": 8})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->method, SpeculativeMethod::kNgram);
  EXPECT_EQ(config->num_speculative_tokens, 4);
  EXPECT_EQ(config->prompt_lookup_min, 2);
  EXPECT_EQ(config->prompt_lookup_max, 5);
  EXPECT_EQ(config->disable_by_batch_size, 8);
  EXPECT_TRUE(config->model.empty());
}

TEST(SpeculativeConfigTest, VllmsPromptLookupDefaults) {
  auto both = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 3})");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->prompt_lookup_min, 5);
  EXPECT_EQ(both->prompt_lookup_max, 5);
  // Left out, disable_by_batch_size is the measured default (vLLM: none).
  EXPECT_EQ(both->disable_by_batch_size, kDefaultDisableByBatchSize);
  auto max_only = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})");
  ASSERT_TRUE(max_only.ok()) << max_only.status();
  EXPECT_EQ(max_only->prompt_lookup_min, 4);
  auto min_only = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2})");
  ASSERT_TRUE(min_only.ok()) << min_only.status();
  EXPECT_EQ(min_only->prompt_lookup_max, 2);
}

TEST(SpeculativeConfigTest, MethodInferredFromTheModelAsVllm) {
  auto method_of = [](const std::string& model) {
    auto config =
        ParseSpeculativeConfig(R"({"model": ")" + model + R"(", "num_speculative_tokens": 2})");
    EXPECT_TRUE(config.ok()) << model << ": " << config.status();
    return config.ok() ? config->method : SpeculativeMethod::kNgram;
  };
  EXPECT_EQ(method_of("/models/llama-68m"), SpeculativeMethod::kDraftModel);
  EXPECT_EQ(method_of("/models/EAGLE-LLaMA3-Instruct-8B"), SpeculativeMethod::kEagle);
  EXPECT_EQ(method_of("/models/EAGLE3-LLaMA3.1-Instruct-8B"), SpeculativeMethod::kEagle3);
  EXPECT_EQ(method_of("/models/Qwen3-8B_eagle3"), SpeculativeMethod::kEagle3);
  EXPECT_EQ(method_of("/models/eagle-eagle3-mix"), SpeculativeMethod::kEagle);  // vLLM's order.
  EXPECT_EQ(method_of("[ngram]"), SpeculativeMethod::kNgram);
  auto eagle = ParseSpeculativeConfig(
      R"({"method": "eagle3", "model": "/m/head", "num_speculative_tokens": 3,
          "draft_tensor_parallel_size": 1})");
  ASSERT_TRUE(eagle.ok()) << eagle.status();
  EXPECT_EQ(eagle->model, "/m/head");
  EXPECT_EQ(eagle->draft_tensor_parallel_size, 1);
  EXPECT_EQ(SpeculativeMethodName(eagle->method), "eagle3");
}

TEST(SpeculativeConfigTest, RefusesBadInputWithOneLineNamingIt) {
  auto expect_refused = [](const std::string& json, const std::string& problem) {
    auto config = ParseSpeculativeConfig(json);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(config.status().message());
    EXPECT_NE(message.find(problem), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  };
  expect_refused("{", "not valid JSON");
  expect_refused("[1]", "JSON object");
  expect_refused(R"({"method": "medusa", "num_speculative_tokens": 2})", "unknown method");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1})",
                 "unknown key \"lookahead\"");
  expect_refused(R"({"method": "ngram"})", "num_speculative_tokens is required");
  expect_refused(R"({"model": "/m", "num_speculative_tokens": 2, "tensor_parallel_size": 1})",
                 "tensor_parallel_size is not a valid key here; pass draft_tensor_parallel_size "
                 "instead");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 0})", "must be in [1, 16]");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 17})", "must be in [1, 16]");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2.5})", "must be an integer");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": "4"})", "must be an integer");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 99999999999})", "out of range");
  expect_refused(R"({"method": 3, "num_speculative_tokens": 2})", "method must be a string");
  expect_refused(R"({"num_speculative_tokens": 2})", "needs a method or a model");
  expect_refused(
      R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4,
          "prompt_lookup_max": 3})",
      "exceeds prompt_lookup_max");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0})",
                 "prompt_lookup_min 0");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 65})",
                 "prompt_lookup_max 65");
  expect_refused(R"({"method": "ngram", "model": "/m", "num_speculative_tokens": 2})",
                 "takes no model");
  expect_refused(R"({"method": "eagle", "num_speculative_tokens": 2})", "needs a model");
  expect_refused(
      R"({"method": "draft_model", "model": "/m", "num_speculative_tokens": 2,
          "prompt_lookup_max": 3})",
      "apply to method ngram");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 1})",
                 "disable_by_batch_size 1");
  expect_refused(
      R"({"method": "draft_model", "model": "/m", "num_speculative_tokens": 2,
          "draft_tensor_parallel_size": 0})",
      "draft_tensor_parallel_size 0");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2, "max_model_len": 64})",
                 "method ngram takes no max_model_len");
  expect_refused(R"({"model": "/m", "num_speculative_tokens": 2, "max_model_len": 0})",
                 "max_model_len 0 must be at least 1");
  expect_refused(R"({"model": "/m", "num_speculative_tokens": 2, "max_model_len": "2k"})",
                 "max_model_len must be an integer");
  expect_refused(R"({"model": "/m", "num_speculative_tokens": 2, "quantization": "bitsandbytes"})",
                 "quantization \"bitsandbytes\": Pagoda serves auto, awq");
  expect_refused(R"({"method": "ngram", "num_speculative_tokens": 2, "quantization": "fp8"})",
                 "quantization applies to method draft_model, not ngram");
  expect_refused(R"({"model": "/m/eagle-x", "num_speculative_tokens": 2, "quantization": "awq"})",
                 "quantization applies to method draft_model, not eagle");
  expect_refused(R"({"model": "/m", "num_speculative_tokens": 2, "quantization": 8})",
                 "quantization must be a string");
}

// vLLM's max_model_len key: kept for the start-up check against the
// proposer's files (CheckDraftModelFiles), which turns it into draft_max_len.
// vLLM's quantization key: a draft model's method, "auto" as none given.
TEST(SpeculativeConfigTest, QuantizationIsTheDraftModels) {
  for (const auto& [given, kept] : {std::pair{"fp8", "fp8"}, std::pair{"awq_marlin", "awq_marlin"},
                                    std::pair{"auto", ""}, std::pair{"", ""}}) {
    auto config = ParseSpeculativeConfig(absl::StrCat(
        R"({"model": "/m/draft", "num_speculative_tokens": 2, "quantization": ")", given, "\"}"));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->quantization, kept) << given;
  }
  // "auto" is no quantization asked for: any method takes it.
  EXPECT_TRUE(ParseSpeculativeConfig(
                  R"({"method": "ngram", "num_speculative_tokens": 2, "quantization": "auto"})")
                  .ok());
}

TEST(SpeculativeConfigTest, MaxModelLenIsKeptForTheDraftOrHead) {
  for (const char* model : {"/m/draft", "/m/eagle-head"}) {
    auto config = ParseSpeculativeConfig(absl::StrCat(
        R"({"model": ")", model, R"(", "num_speculative_tokens": 2, "max_model_len": 96})"));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->max_model_len, 96);
    EXPECT_FALSE(config->draft_max_len.has_value());
  }
  auto unset = ParseSpeculativeConfig(R"({"model": "/m", "num_speculative_tokens": 2})");
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->max_model_len.has_value());
}

TEST(SpeculativeConfigTest, DraftTensorParallelSizeIsOneOrTheTargets) {
  auto config = ParseSpeculativeConfig(
      R"({"model": "/m/draft", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 2})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(CheckAgainstTarget(*config, 2).ok());
  const absl::Status status = CheckAgainstTarget(*config, 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("must be 1 or the target's 4"), std::string::npos) << status;
  config->draft_tensor_parallel_size = 1;
  EXPECT_TRUE(CheckAgainstTarget(*config, 4).ok());
}

// vLLM's dynamic speculative decoding: its lookup's own test cases (a
// batch size between ranges or past the last takes the range below; k at
// most num_speculative_tokens), entries in any order, and the default
// disable_by_batch_size dropped.
TEST(SpeculativeConfigTest, BatchSizeScheduleFollowsVllmsLookup) {
  auto config = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 3,
          "num_speculative_tokens_per_batch_size": [[256, 2048, 0], [1, 16, 3], [32, 128, 2]]})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->per_batch_size,
            (std::vector<BatchSizeDrafts>{{1, 16, 3}, {32, 128, 2}, {256, 2048, 0}}));
  EXPECT_FALSE(config->disable_by_batch_size.has_value());
  const std::pair<int, int> expected[] = {{1, 3},   {16, 3},  {17, 3},  {31, 3},   {32, 2},
                                          {128, 2}, {129, 2}, {255, 2}, {256, 0}, {5000, 0}};
  for (const auto& [batch, k] : expected) {
    EXPECT_EQ(SpeculativeTokensFor(*config, batch), k) << batch;
  }
  auto clamped = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 3,
          "num_speculative_tokens_per_batch_size": [[1, 256, 4]]})");
  ASSERT_TRUE(clamped.ok()) << clamped.status();
  EXPECT_EQ(SpeculativeTokensFor(*clamped, 1), 3);
  EXPECT_EQ(SpeculativeTokensFor(*clamped, 256), 3);
  EXPECT_EQ(SpeculativeTokensFor(*clamped, 300), 3);
  // Without a schedule every batch size may propose k (disable_by_batch_size
  // is DraftBudget's).
  auto plain = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4})");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(SpeculativeTokensFor(*plain, 100), 4);
  EXPECT_EQ(plain->disable_by_batch_size, kDefaultDisableByBatchSize);
}

TEST(SpeculativeConfigTest, RefusesBadBatchSizeSchedules) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "must be a list of 1 to 256"},
      {"3", "must be a list of 1 to 256"},
      {"[[1, 4]]", "each entry must be [first, last, k]"},
      {"[[1, 4, 2.5]]", "each entry must be [first, last, k]"},
      {"[[1, \"4\", 2]]", "each entry must be [first, last, k]"},
      {"[[1, 4, 1, 100, 2]]", "5-item form"},
      {"[[0, 4, 2]]", "range (0, 4) must be positive"},
      {"[[1, 4, 2], [9, 5, 1]]", "start 9 must be <= its end 5"},
      {"[[1, 4, -1]]", "k -1 must be >= 0"},
      {"[[1, 8, 2], [8, 16, 1]]", "must not overlap (1-8 and 8-16)"},
      {"[[2, 8, 2]]", "must start at 1"},
  };
  for (const auto& [schedule, problem] : cases) {
    const std::string json =
        absl::StrCat(R"({"method": "ngram", "num_speculative_tokens": 2, )",
                     R"("num_speculative_tokens_per_batch_size": )", schedule, "}");
    auto config = ParseSpeculativeConfig(json);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_NE(config.status().message().find(problem), std::string::npos) << config.status();
  }
  std::string many;  // One entry past the bound, each range valid.
  for (int i = 1; i <= kMaxBatchSizeScheduleEntries + 1; ++i) {
    absl::StrAppend(&many, many.empty() ? "[[" : ", [", i, ", ", i, ", 1]");
  }
  auto too_many = ParseSpeculativeConfig(
      absl::StrCat(R"({"method": "ngram", "num_speculative_tokens": 2, )",
                   R"("num_speculative_tokens_per_batch_size": )", many, "]}"));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("1 to 256"), std::string::npos) << too_many.status();
  auto both = ParseSpeculativeConfig(
      R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 8,
          "num_speculative_tokens_per_batch_size": [[1, 4, 2]]})");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("not both"), std::string::npos) << both.status();
}

}  // namespace
}  // namespace pagoda::scheduler
