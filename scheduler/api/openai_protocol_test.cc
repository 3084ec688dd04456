#include "scheduler/api/openai_protocol.h"

#include <string>

#include "gtest/gtest.h"
#include "scheduler/api/field_error.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;

absl::Status ParseError(const json& body, bool chat = false) {
  return ParseOpenAiRequest(body, chat, 512).status();
}

TEST(OpenAiProtocolTest, MapsCompletionFieldsToTheGrpcRequest) {
  auto parsed = ParseOpenAiRequest(
      json::parse(R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 7, "temperature": 0,
                      "top_p": 0.5, "seed": 9, "n": 3, "stop": "END", "logprobs": 2,
                      "stream": true, "stream_options": {"include_usage": true}})"),
      false, 512);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const pagoda::v1::GenerateRequest& request = parsed->generate;
  EXPECT_EQ(request.prompt_token_ids_size(), 3);
  EXPECT_EQ(request.stopping().max_tokens(), 7);
  EXPECT_EQ(request.sampling().temperature(), 0.0f);
  EXPECT_EQ(request.sampling().top_p(), 0.5f);
  EXPECT_EQ(request.sampling().seed(), 9u);
  EXPECT_EQ(request.sampling().n(), 1);  // Greedy: one sequence, three copies.
  EXPECT_EQ(parsed->copies, 3);
  ASSERT_EQ(request.stopping().stop_size(), 1);
  EXPECT_EQ(request.stopping().stop(0), "END");
  EXPECT_EQ(request.logprobs(), 2);
  EXPECT_TRUE(parsed->stream && parsed->include_usage);
}

TEST(OpenAiProtocolTest, DefaultsFollowOpenAi) {
  auto completion = ParseOpenAiRequest(json{{"model", "m"}, {"prompt", "hi"}}, false, 512);
  ASSERT_TRUE(completion.ok());
  EXPECT_EQ(completion->generate.sampling().temperature(), 1.0f);
  EXPECT_EQ(completion->generate.stopping().max_tokens(), 16);
  EXPECT_EQ(completion->top_logprobs, -1);
  auto chat = ParseOpenAiRequest(
      json{{"model", "m"}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}},
      true, 512);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->generate.stopping().max_tokens(), 512);
  ASSERT_EQ(chat->messages.size(), 1u);
  EXPECT_EQ(chat->messages[0].content, "hi");
}

// The generation config's max_new_tokens (vLLM's default max_tokens) fills
// only a max_tokens that is "until the context is full": chat without one,
// or null anywhere; a completion that leaves the field out keeps its 16.
TEST(OpenAiProtocolTest, TheModelsDefaultMaxTokensFillsOnlyAnOpenMaxTokens) {
  SamplingDefaults defaults;
  defaults.max_tokens = 40;
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  const auto max_tokens = [&](json body, bool chat) {
    absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(body, chat, 512, defaults);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    return parsed.ok() ? parsed->generate.stopping().max_tokens() : -1;
  };
  EXPECT_EQ(max_tokens({{"messages", messages}}, true), 40);
  EXPECT_EQ(max_tokens({{"messages", messages}, {"max_tokens", nullptr}}, true), 40);
  EXPECT_EQ(max_tokens({{"messages", messages}, {"max_tokens", 90}}, true), 90);
  EXPECT_EQ(max_tokens({{"messages", messages}, {"max_completion_tokens", 5}}, true), 5);
  EXPECT_EQ(max_tokens({{"prompt", "hi"}}, false), 16);
  EXPECT_EQ(max_tokens({{"prompt", "hi"}, {"max_tokens", nullptr}}, false), 40);
  EXPECT_EQ(max_tokens({{"prompt", "hi"}, {"max_tokens", 90}}, false), 90);
  // Without a model default, null is the model length, as vLLM's None.
  defaults.max_tokens.reset();
  EXPECT_EQ(max_tokens({{"prompt", "hi"}, {"max_tokens", nullptr}}, false), 512);
  EXPECT_EQ(max_tokens({{"messages", messages}}, true), 512);
}

// vLLM's usage, with --enable-prompt-tokens-details' details.
TEST(OpenAiProtocolTest, UsageCarriesCachedTokensWhenAsked) {
  EXPECT_EQ(OpenAiUsage(40, 3).dump(),
            R"({"completion_tokens":3,"prompt_tokens":40,"total_tokens":43})");
  EXPECT_EQ(OpenAiUsage(40, 3, 32).dump(),
            R"({"completion_tokens":3,"prompt_tokens":40,)"
            R"("prompt_tokens_details":{"cached_tokens":32},"total_tokens":43})");
  EXPECT_EQ(OpenAiUsage(40, 3, 0)["prompt_tokens_details"]["cached_tokens"], 0);
}

TEST(OpenAiProtocolTest, MapsLogitsProcessingFieldsToTheGrpcRequest) {
  auto parsed = ParseOpenAiRequest(
      json::parse(R"({"model": "m", "prompt": "hi", "presence_penalty": 0.5,
                      "frequency_penalty": -0.25, "repetition_penalty": 1.2, "min_p": 0.1,
                      "logit_bias": {"7": -100, "12": 3.5}, "allowed_token_ids": [1, 7, 12],
                      "bad_words": ["foo", "bar baz"]})"),
      false, 512);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const pagoda::v1::SamplingParams& sampling = parsed->generate.sampling();
  EXPECT_EQ(sampling.presence_penalty(), 0.5f);
  EXPECT_EQ(sampling.frequency_penalty(), -0.25f);
  EXPECT_EQ(sampling.repetition_penalty(), 1.2f);
  EXPECT_EQ(sampling.min_p(), 0.1f);
  ASSERT_EQ(sampling.logit_bias_size(), 2);
  EXPECT_EQ(sampling.logit_bias().at(7), -100.0f);
  EXPECT_EQ(sampling.logit_bias().at(12), 3.5f);
  EXPECT_EQ(sampling.allowed_token_ids_size(), 3);
  ASSERT_EQ(sampling.bad_words_size(), 2);
  EXPECT_EQ(sampling.bad_words(1), "bar baz");
}

TEST(OpenAiProtocolTest, AbsentSamplingFieldsLeaveTheModelDefaults) {
  const json body = {{"model", "m"}, {"prompt", "hi"}};
  auto plain = ParseOpenAiRequest(body, false, 512);
  ASSERT_TRUE(plain.ok());
  // No model default: OpenAI's temperature 1; the rest unset.
  EXPECT_TRUE(plain->generate.sampling().has_temperature());
  EXPECT_EQ(plain->generate.sampling().temperature(), 1.0f);
  EXPECT_FALSE(plain->generate.sampling().has_top_p());
  EXPECT_FALSE(plain->generate.sampling().has_top_k());
  EXPECT_FALSE(plain->generate.sampling().has_min_p());
  EXPECT_FALSE(plain->generate.sampling().has_repetition_penalty());
  SamplingDefaults defaults;
  defaults.temperature = 0.6f;
  auto with_default = ParseOpenAiRequest(body, false, 512, defaults);
  ASSERT_TRUE(with_default.ok());
  EXPECT_FALSE(with_default->generate.sampling().has_temperature());
  json explicit_zero = body;
  explicit_zero["temperature"] = 0;
  auto greedy = ParseOpenAiRequest(explicit_zero, false, 512, defaults);
  ASSERT_TRUE(greedy.ok());
  EXPECT_TRUE(greedy->generate.sampling().has_temperature());
  EXPECT_EQ(greedy->generate.sampling().temperature(), 0.0f);
}

TEST(OpenAiProtocolTest, BadFieldsAreInvalidArgumentNamingTheField) {
  const json base = {{"model", "m"}, {"prompt", "hi"}};
  struct Case {
    const char* field;
    json value;
  } cases[] = {{"max_tokens", -1},
               {"max_tokens", "8"},
               {"temperature", "3"},
               {"top_p", 0},
               {"n", 0},
               {"seed", -5},
               {"stop", 5},
               {"stop", json::array({1})},
               {"logprobs", 21},
               {"stream", "yes"},
               {"presence_penalty", 2.5},
               {"frequency_penalty", -3},
               {"frequency_penalty", "1"},
               {"repetition_penalty", 2.5},
               {"repetition_penalty", -1},
               {"min_p", 1.5},
               {"logit_bias", {{"x", 2}}},
               {"logit_bias", {{"-1", 2}}},
               {"logit_bias", {{"1", "2"}}},
               {"logit_bias", json::array({1})},
               {"allowed_token_ids", json::array({-1})},
               {"allowed_token_ids", 5},
               {"bad_words", json::array({1})},
               {"bad_words", "word"},
               {"prompt", json::array()},
               {"prompt", json::array({-1})},
               {"best_of", 2},  // Only with use_beam_search.
               {"use_beam_search", "yes"},
               {"early_stopping", 1},
               {"length_penalty", "1"}};
  for (const Case& c : cases) {
    json body = base;
    body[c.field] = c.value;
    const absl::Status status = ParseError(body);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field << " " << c.value;
    EXPECT_EQ(status.message().rfind(c.field, 0), 0u) << status;
  }
  EXPECT_TRUE(ParseError(json{{"prompt", "hi"}}).ok());  // No model: the served one.
  EXPECT_FALSE(ParseError(json{{"model", 3}, {"prompt", "hi"}}).ok());
  EXPECT_FALSE(ParseError(json::array()).ok());
  EXPECT_FALSE(ParseError(json{{"model", "m"}, {"messages", json::array()}}, true).ok());
  EXPECT_FALSE(
      ParseError(json{{"model", "m"}, {"stream_options", json::object()}, {"prompt", "x"}}).ok());
}

// Every boolean field: another type is refused naming it; null counts as
// absent. Reading them threw before (json::value with a bool default on a
// string or null), and an exception out of a route ended the server; the
// api_request fuzzer found the first such body.
TEST(OpenAiProtocolTest, BooleansOfAnotherTypeOrNullNeverThrow) {
  const json completion = {{"model", "m"}, {"prompt", "hi"}};
  const json chat = {{"model", "m"},
                     {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  struct Case {
    const json& base;
    const char* field;
  } cases[] = {{completion, "include_stop_str_in_output"}, {completion, "use_beam_search"},
               {completion, "early_stopping"},             {chat, "logprobs"},
               {chat, "add_generation_prompt"},            {completion, "stream"}};
  for (const Case& c : cases) {
    const bool is_chat = &c.base == &chat;
    json body = c.base;
    body[c.field] = "yes";
    const absl::Status refused = ParseError(body, is_chat);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(refused.message().rfind(c.field, 0), 0u) << refused;
    body[c.field] = nullptr;
    EXPECT_TRUE(ParseError(body, is_chat).ok()) << c.field;
  }
  for (const char* key : {"include_usage", "continuous_usage_stats"}) {
    json body = completion;
    body["stream"] = true;
    body["stream_options"] = {{key, nullptr}};
    EXPECT_TRUE(ParseError(body).ok()) << key;
    body["stream_options"][key] = 1;
    EXPECT_EQ(ParseError(body).code(), absl::StatusCode::kInvalidArgument) << key;
  }
  json part_type = chat;
  part_type["messages"][0]["content"] =
      json::array({{{"type", json::array({"text"})}, {"text", "hi"}}});
  EXPECT_EQ(ParseError(part_type, true).code(), absl::StatusCode::kInvalidArgument);
}

TEST(OpenAiProtocolTest, ErrorsHaveOpenAisShapeAndStatus) {
  EXPECT_EQ(HttpStatusOf(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("x")), 503);
  const json error = MakeOpenAiError(absl::InvalidArgumentError("prompt: empty"));
  EXPECT_EQ(error["error"]["message"], "prompt: empty");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_EQ(error["error"]["code"], 400);
  EXPECT_EQ(error["error"]["param"], "prompt");
}

// "param" names the field the message names, as an OpenAI client knows it;
// null when the message names none, or the error is not the request's.
TEST(OpenAiProtocolTest, ErrorParamNamesTheRefusedField) {
  auto param = [](const absl::Status& status) { return MakeOpenAiError(status)["error"]["param"]; };
  EXPECT_EQ(param(InvalidField("temperature", "must be in [0, 2], got 5")), "temperature");
  EXPECT_EQ(param(InvalidField("messages[0].content", "must be a string")),
            "messages[0].content");
  // The validator's gRPC paths lose the level the OpenAI body does not have.
  EXPECT_EQ(param(absl::InvalidArgumentError("sampling.top_p: must be in (0, 1]")), "top_p");
  EXPECT_EQ(param(absl::InvalidArgumentError("stopping.max_tokens: must be at least 1")),
            "max_tokens");
  EXPECT_EQ(param(absl::InvalidArgumentError("prompt_token_ids[3]: 100 is not in the vocabulary")),
            "prompt_token_ids[3]");
  // No field named: a sentence, a bad path, an empty index.
  EXPECT_TRUE(param(absl::InvalidArgumentError("prompt is too long: 600 tokens")).is_null());
  EXPECT_TRUE(param(absl::InvalidArgumentError("bad value: x")).is_null());
  EXPECT_TRUE(param(absl::InvalidArgumentError("logit_bias[]: x")).is_null());
  EXPECT_TRUE(param(absl::InvalidArgumentError("no colon here")).is_null());
  // Not the request's fault: no param, whatever the message.
  EXPECT_TRUE(param(absl::UnavailableError("worker: down")).is_null());
  EXPECT_TRUE(MakeOpenAiError(401, "api_key: missing")["error"]["param"].is_null());
}

}  // namespace
TEST(OpenAiProtocolTest, AcceptsWhatVllmAccepts) {
  // A list of prompts: one request per prompt, the options shared.
  auto listed =
      ParseOpenAiRequest(json{{"prompt", json::array({"a", "b"})}, {"max_tokens", 3}}, false, 512);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->prompts.size(), 2u);
  EXPECT_EQ(PromptRequest(*listed, 1).prompt(), "b");
  EXPECT_EQ(PromptRequest(*listed, 1).stopping().max_tokens(), 3);
  auto id_lists = ParseOpenAiRequest(
      json{{"prompt", json::array({json::array({1, 2}), json::array({3})})}}, false, 512);
  ASSERT_TRUE(id_lists.ok()) << id_lists.status();
  EXPECT_EQ(PromptRequest(*id_lists, 1).prompt_token_ids_size(), 1);
  // n greedy samples: one sequence, copied.
  auto greedy = ParseOpenAiRequest(json{{"prompt", "a"}, {"n", 3}, {"temperature", 0}}, false, 8);
  ASSERT_TRUE(greedy.ok());
  EXPECT_EQ(greedy->copies, 3);
  EXPECT_EQ(greedy->generate.sampling().n(), 1);
  auto sampled = ParseOpenAiRequest(json{{"prompt", "a"}, {"n", 3}}, false, 8);
  EXPECT_EQ(sampled->copies, 1);
  EXPECT_EQ(sampled->generate.sampling().n(), 3);
  // vLLM's beam search: best_of is the width, n beams come back (not
  // copies), temperature 0 unless given.
  auto beams = ParseOpenAiRequest(json{{"prompt", "a"}, {"n", 2}, {"use_beam_search", true},
                                       {"best_of", 4}, {"length_penalty", 0.5},
                                       {"early_stopping", true}},
                                  false, 8);
  ASSERT_TRUE(beams.ok()) << beams.status();
  EXPECT_EQ(beams->copies, 1);
  const pagoda::v1::SamplingParams& beam = beams->generate.sampling();
  EXPECT_TRUE(beam.use_beam_search());
  EXPECT_EQ(beam.n(), 2);
  EXPECT_EQ(beam.best_of(), 4);
  EXPECT_EQ(beam.length_penalty(), 0.5f);
  EXPECT_TRUE(beam.early_stopping());
  EXPECT_FALSE(beam.has_temperature());  // The validator's beam default: 0.
  EXPECT_TRUE(ParseOpenAiRequest(json{{"prompt", "a"}, {"best_of", 1}}, false, 8).ok());
  // No-ops.
  EXPECT_TRUE(ParseOpenAiRequest(json{{"prompt", "a"},
                                      {"response_format", {{"type", "text"}}},
                                      {"user", "u"},
                                      {"metadata", {{"k", "v"}}},
                                      {"store", false}},
                                 false, 8)
                  .ok());
  auto streamed = ParseOpenAiRequest(
      json{{"prompt", "a"},
           {"stream", true},
           {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}},
      false, 8);
  ASSERT_TRUE(streamed.ok());
  EXPECT_TRUE(streamed->continuous_usage_stats);
  auto echo = ParseOpenAiRequest(json{{"prompt", "a"}, {"echo", true}}, false, 8);
  ASSERT_TRUE(echo.ok());
  EXPECT_TRUE(echo->echo);
}

TEST(OpenAiProtocolTest, RefusesWhatItCannotDoNamingTheField) {
  const json base = {{"prompt", "a"}};
  auto refused = [&](json extra, bool chat = false) {
    json body = base;
    if (chat) body = {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}};
    body.update(extra);
    return ParseOpenAiRequest(body, chat, 8).status();
  };
  EXPECT_EQ(refused({{"suffix", "end"}}).message().rfind("suffix", 0), 0u);
  EXPECT_EQ(refused({{"response_format", {{"type", "xml"}}}})
                .message()
                .rfind("response_format.type", 0),
            0u);
  EXPECT_EQ(refused({{"response_format", {{"type", "json_schema"}}}})
                .message()
                .rfind("response_format.json_schema", 0),
            0u);
  EXPECT_EQ(refused({{"guided_json", {{"type", "object"}}}}).message().rfind("guided_json", 0), 0u);
  EXPECT_EQ(refused({{"structured_outputs", {{"regex", "a"}, {"choice", {"b"}}}}})
                .message()
                .rfind("structured_outputs", 0),
            0u);
  EXPECT_EQ(refused({{"structured_outputs", {{"whitespace_pattern", " "}}}})
                .message()
                .rfind("structured_outputs.whitespace_pattern", 0),
            0u);
  EXPECT_EQ(refused({{"response_format", {{"type", "json_object"}}},
                     {"structured_outputs", {{"regex", "a"}}}})
                .message()
                .rfind("structured_outputs", 0),
            0u);
  EXPECT_EQ(refused({{"echo", true}, {"logprobs", 1}, {"stream", true}}).message().rfind("echo", 0),
            0u);
  EXPECT_EQ(refused({{"prompt_logprobs", 2}, {"stream", true}}).message().rfind("prompt_logprobs", 0),
            0u);
  EXPECT_EQ(refused({{"prompt_logprobs", 21}}).message().rfind("prompt_logprobs", 0), 0u);
  EXPECT_EQ(refused({{"prompt_logprobs", -1}}).message().rfind("prompt_logprobs", 0), 0u);
  EXPECT_EQ(refused({{"prompt_logprobs", "2"}}).message().rfind("prompt_logprobs", 0), 0u);
  EXPECT_EQ(refused({{"echo", true}}, true).message().rfind("echo", 0), 0u);
  EXPECT_EQ(refused({{"prompt", json::array({"a", 3})}}).message().rfind("prompt", 0), 0u);
  EXPECT_EQ(refused({{"prompt", json::array({json::array()})}}).message().rfind("prompt", 0), 0u);
  EXPECT_EQ(refused({{"stream", true}, {"stream_options", {{"continuous_usage_stats", 1}}}})
                .message()
                .rfind("stream_options.continuous_usage_stats", 0),
            0u);
}

TEST(OpenAiProtocolTest, EchoWithLogprobsAndPromptLogprobsAskForPromptLogprobs) {
  auto echo = ParseOpenAiRequest(json{{"prompt", "a"}, {"echo", true}, {"logprobs", 3}}, false, 8);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_EQ(echo->generate.prompt_logprobs(), 3);
  EXPECT_FALSE(echo->vllm_prompt_logprobs);
  auto plain = ParseOpenAiRequest(json{{"prompt", "a"}, {"logprobs", 3}}, false, 8);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->generate.has_prompt_logprobs());
  auto vllm = ParseOpenAiRequest(json{{"prompt", "a"}, {"prompt_logprobs", 0}}, false, 8);
  ASSERT_TRUE(vllm.ok());
  EXPECT_EQ(vllm->generate.prompt_logprobs(), 0);
  EXPECT_TRUE(vllm->vllm_prompt_logprobs);
  auto chat = ParseOpenAiRequest(
      json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})},
           {"prompt_logprobs", 4}},
      true, 8);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->generate.prompt_logprobs(), 4);
}

TEST(OpenAiProtocolTest, EchoedPromptLogprobsComeBeforeTheChoicesInOpenAisShape) {
  auto request = ParseOpenAiRequest(
      json{{"prompt", json::array({7, 8, 9})}, {"echo", true}, {"logprobs", 1}}, false, 8);
  ASSERT_TRUE(request.ok());
  pagoda::v1::GenerateResponse response;
  for (int id : {8, 9}) {
    auto* entry = response.add_prompt_logprobs();
    entry->set_token_id(id);
    entry->set_logprob(-0.5f * id);
    auto* top = entry->add_top();
    top->set_token_id(4);
    top->set_logprob(-0.25f);
  }
  json logprobs = {{"tokens", {"token_id:5"}},
                   {"token_logprobs", {-1.5}},
                   {"top_logprobs", {json{{"token_id:5", -1.5}}}},
                   {"text_offset", {0}}};
  PrependPromptLogprobs(*request, {7, 8, 9}, response, nullptr, &logprobs);
  EXPECT_EQ(logprobs["tokens"],
            json({"token_id:7", "token_id:8", "token_id:9", "token_id:5"}));
  EXPECT_EQ(logprobs["token_logprobs"], json({nullptr, -4.0, -4.5, -1.5}));
  EXPECT_TRUE(logprobs["top_logprobs"][0].is_null());
  EXPECT_EQ(logprobs["top_logprobs"][1], json({{"token_id:4", -0.25}}));
  EXPECT_EQ(logprobs["text_offset"], json({0, 10, 20, 30}));
}

// Each id decodes to "<id>" (a tokenizer whose texts tell ids apart).
class AngleTokenizer : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int>> Encode(const std::string&) const override {
    return std::vector<int>{};
  }
  absl::StatusOr<std::string> Decode(const std::vector<int>& ids) const override {
    std::string text;
    for (int id : ids) absl::StrAppend(&text, "<", id, ">");
    return text;
  }
  int vocab_size() const override { return 100; }
  std::string kind() const override { return "angle"; }
};

// vLLM's return_tokens_as_token_ids: logprobs name tokens "token_id:N",
// chat and completions alike; the request's value wins over the server's.
TEST(OpenAiProtocolTest, ReturnTokensAsTokenIdsNamesLogprobTokensByTheirIds) {
  const AngleTokenizer tokenizer;
  pagoda::v1::GenerateResponse response;
  pagoda::v1::TokenLogprobs* token = response.add_outputs()->add_logprobs();
  token->set_token_id(7);
  token->set_logprob(-0.5f);
  pagoda::v1::TokenLogprob* top = token->add_top();
  top->set_token_id(7);
  top->set_logprob(-0.5f);
  response.mutable_outputs(0)->add_token_ids(7);
  const auto logprobs = [&](json body, bool chat) {
    body[chat ? "messages" : "prompt"] =
        chat ? json::array({{{"role", "user"}, {"content", "x"}}}) : json("x");
    body[chat ? "top_logprobs" : "logprobs"] = 1;
    if (chat) body["logprobs"] = true;
    absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(body, chat, 8);
    EXPECT_TRUE(request.ok()) << request.status();
    return MakeOpenAiResponse(*request, response, "m", 0, &tokenizer)["choices"][0]["logprobs"];
  };
  const json as_ids = {{"return_tokens_as_token_ids", true}};
  EXPECT_EQ(logprobs(as_ids, false)["tokens"], json({"token_id:7"}));
  EXPECT_EQ(logprobs(as_ids, false)["top_logprobs"][0], json({{"token_id:7", -0.5}}));
  EXPECT_EQ(logprobs(json::object(), false)["tokens"], json({"<7>"}));
  const json chat = logprobs(as_ids, true)["content"][0];
  EXPECT_EQ(chat["token"], "token_id:7");
  EXPECT_EQ(chat["bytes"], json::array({116, 111, 107, 101, 110, 95, 105, 100, 58, 55}));
  EXPECT_EQ(chat["top_logprobs"][0]["token"], "token_id:7");
  EXPECT_EQ(logprobs(json::object(), true)["content"][0]["token"], "<7>");
  EXPECT_FALSE(
      ParseOpenAiRequest(json{{"prompt", "x"}, {"return_tokens_as_token_ids", 1}}, false, 8).ok());
}

TEST(OpenAiProtocolTest, VllmPromptLogprobsAreNullThenTokenIdKeyedEntries) {
  auto request = ParseOpenAiRequest(json{{"prompt", "a"}, {"prompt_logprobs", 1}}, false, 8);
  ASSERT_TRUE(request.ok());
  pagoda::v1::GenerateResponse response;
  response.add_outputs();
  auto* entry = response.add_prompt_logprobs();
  entry->set_token_id(9);
  entry->set_logprob(-3.0f);
  auto* top = entry->add_top();
  top->set_token_id(4);
  top->set_logprob(-0.5f);
  const json whole = MakeOpenAiResponse(*request, response, "m", 0, nullptr);
  const json& prompt = whole["choices"][0]["prompt_logprobs"];
  ASSERT_EQ(prompt.size(), 2u);
  EXPECT_TRUE(prompt[0].is_null());
  EXPECT_EQ(prompt[1]["4"]["rank"], 1);
  EXPECT_EQ(prompt[1]["4"]["logprob"], -0.5);
  EXPECT_EQ(prompt[1]["9"]["logprob"], -3.0);
  EXPECT_EQ(prompt[1]["9"]["decoded_token"], "token_id:9");
}

// vLLM's chat_template_kwargs (chat and /tokenize) and /tokenize's tools:
// kept in the client's key order, bounded and named as template variables.
TEST(OpenAiProtocolTest, ChatTemplateKwargsAndTokenizeTools) {
  const std::string body_text = R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "now", "parameters":
                 {"type": "object", "properties": {"z": {}, "a": {}}}}}],
      "chat_template_kwargs": {"tools_in_user_message": false, "date_string": "01 Sep 2026"}})";
  const json body = json::parse(body_text);
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body_text);
  ASSERT_TRUE(NeedsOrderedBody(body));
  auto tokenize = ParseTokenizeRequest(body, &ordered);
  ASSERT_TRUE(tokenize.ok()) << tokenize.status();
  EXPECT_EQ(tokenize->tools[0]["function"]["parameters"]["properties"].begin().key(), "z");
  EXPECT_EQ(tokenize->chat_template_kwargs.begin().key(), "tools_in_user_message");
  auto chat = ParseOpenAiRequest(body, true, 512, {}, &ordered, ToolCallParser::kLlama3Json);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->chat_template_kwargs["date_string"], "01 Sep 2026");
  const json user = json::array({{{"role", "user"}, {"content", "x"}}});
  json too_many = json::object();
  for (int i = 0; i < 33; ++i) too_many["v" + std::to_string(i)] = i;
  for (const json& kwargs : {json("x"), json::array(), too_many, json{{"1st", 1}},
                             json{{"a-b", 1}}, json{{"", 1}}, json{{std::string(65, 'a'), 1}}}) {
    const json bad = {{"messages", user}, {"chat_template_kwargs", kwargs}};
    EXPECT_NE(ParseError(bad, true).message().find("chat_template_kwargs"), std::string::npos)
        << kwargs;
    EXPECT_FALSE(ParseTokenizeRequest(bad, nullptr).ok()) << kwargs;
  }
  EXPECT_NE(ParseError({{"prompt", "x"}, {"chat_template_kwargs", json::object()}})
                .message()
                .find("chat_template_kwargs"),
            std::string::npos);
  EXPECT_NE(ParseTokenizeRequest({{"messages", user}, {"tools", "x"}}, nullptr)
                .status()
                .message()
                .find("tools"),
            std::string::npos);
}

TEST(OpenAiProtocolTest, TokenizeAndDetokenizeBodies) {
  auto prompt = ParseTokenizeRequest(json{{"prompt", "hi"}}, nullptr);
  ASSERT_TRUE(prompt.ok());
  EXPECT_TRUE(prompt->add_special_tokens);
  EXPECT_FALSE(prompt->chat);
  auto chat = ParseTokenizeRequest(
      json{{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}}, nullptr);
  ASSERT_TRUE(chat.ok());
  EXPECT_TRUE(chat->chat);
  EXPECT_FALSE(chat->add_special_tokens);
  EXPECT_FALSE(ParseTokenizeRequest(json{{"prompt", 3}}, nullptr).ok());
  EXPECT_FALSE(
      ParseTokenizeRequest(json{{"prompt", "x"}, {"add_special_tokens", "no"}}, nullptr).ok());
  std::string model;
  auto ids = ParseDetokenizeRequest(json{{"tokens", {1, 2}}, {"model", "m"}}, 10, &model);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->size(), 2u);
  EXPECT_EQ(model, "m");
  EXPECT_FALSE(ParseDetokenizeRequest(json{{"tokens", {10}}}, 10, &model).ok());
  EXPECT_FALSE(ParseDetokenizeRequest(json{{"tokens", {-1}}}, 10, &model).ok());
  EXPECT_FALSE(ParseDetokenizeRequest(json{{"tokens", "1"}}, 10, &model).ok());
}

TEST(OpenAiProtocolTest, HttpLevelErrorsCarryTheirStatusAsCode) {
  const json error = MakeOpenAiError(413, "body over 4194304 bytes");
  EXPECT_EQ(error["error"]["code"], 413);
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_EQ(MakeOpenAiError(absl::UnavailableError("x"))["error"]["code"], 503);
}

}  // namespace pagoda::scheduler

namespace pagoda::scheduler {
namespace {

TEST(OpenAiProtocolTest, PriorityIsAnIntegerPassedToTheGrpcRequest) {
  auto parsed = ParseOpenAiRequest(json{{"model", "m"}, {"prompt", "hi"}, {"priority", -4}},
                                   false, 512);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->generate.priority(), -4);
  auto absent = ParseOpenAiRequest(json{{"model", "m"}, {"prompt", "hi"}}, false, 512);
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(absent->generate.priority(), 0);
  for (const json& bad : {json("1"), json(1.5), json(int64_t{1} << 40)}) {
    const absl::Status status = ParseError(json{{"model", "m"}, {"prompt", "hi"}, {"priority", bad}});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("priority"), std::string::npos) << status;
  }
}

TEST(OpenAiProtocolTest, StructuredOutputsBecomeTheConstraint) {
  const std::string raw =
      R"({"prompt": "a", "response_format": {"type": "json_schema", "json_schema":
          {"name": "n", "strict": true, "schema": {"type": "object",
           "properties": {"zeta": {"type": "integer"}, "alpha": {"type": "string"}}}}}})";
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(raw);
  auto parsed = ParseOpenAiRequest(json::parse(raw), false, 8, SamplingDefaults{}, &ordered);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // The client's property order survives (nlohmann::json alone sorts keys).
  EXPECT_LT(parsed->generate.json_schema().find("zeta"), parsed->generate.json_schema().find("alpha"));

  auto object = ParseOpenAiRequest(json{{"prompt", "a"}, {"response_format", {{"type", "json_object"}}}},
                                   false, 8);
  ASSERT_TRUE(object.ok());
  EXPECT_TRUE(object->generate.json_object());

  auto choice = ParseOpenAiRequest(
      json{{"prompt", "a"},
           {"structured_outputs", {{"choice", {"yes", "no"}}, {"disable_any_whitespace", true}}}},
      false, 8);
  ASSERT_TRUE(choice.ok()) << choice.status();
  ASSERT_EQ(choice->generate.choice().choices_size(), 2);
  EXPECT_TRUE(choice->generate.disable_any_whitespace());

  auto regex = ParseOpenAiRequest(json{{"prompt", "a"}, {"structured_outputs", {{"regex", "\\d+"}}}},
                                  false, 8);
  ASSERT_TRUE(regex.ok());
  EXPECT_EQ(regex->generate.regex(), "\\d+");

  auto schema_text = ParseOpenAiRequest(
      json{{"prompt", "a"}, {"structured_outputs", {{"json", "{\"type\": \"integer\"}"}}}}, false, 8);
  ASSERT_TRUE(schema_text.ok());
  EXPECT_EQ(schema_text->generate.json_schema(), "{\"type\": \"integer\"}");
}

// vLLM's return_token_ids: each choice's token_ids, and the prompt's ids
// where vLLM puts them (completions: per choice; chat: beside the choices),
// whole and streamed; a chunk whose text is held back still carries its ids.
TEST(OpenAiProtocolTest, ReturnTokenIdsPutsTheIdsWhereVllmDoes) {
  EXPECT_EQ(ParseError({{"prompt", "x"}, {"return_token_ids", "yes"}}).message(),
            "return_token_ids: must be a boolean");
  pagoda::v1::GenerateResponse response;
  response.set_request_id("r");
  response.set_prompt_token_count(2);
  pagoda::v1::SequenceOutput* output = response.add_outputs();
  output->add_token_ids(7);
  output->add_token_ids(8);
  output->set_text("hi");
  for (bool chat : {false, true}) {
    SCOPED_TRACE(chat ? "chat" : "completions");
    json body = {{"return_token_ids", true}};
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", "x"}}});
    } else {
      body["prompt"] = "x";
    }
    absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(body, chat, 512);
    ASSERT_TRUE(request.ok()) << request.status();
    EXPECT_TRUE(request->return_token_ids);
    json whole = MakeOpenAiResponse(*request, response, "m", 1, nullptr);
    AddPromptTokenIds(*request, {4, 5}, {true, true}, &whole);
    EXPECT_EQ(whole["choices"][0]["token_ids"], json({7, 8}));
    if (chat) {
      EXPECT_EQ(whole["prompt_token_ids"], json({4, 5}));
      EXPECT_FALSE(whole["choices"][0].contains("prompt_token_ids"));
    } else {
      EXPECT_EQ(whole["choices"][0]["prompt_token_ids"], json({4, 5}));
      EXPECT_FALSE(whole.contains("prompt_token_ids"));
    }
    // A streamed chunk: the first carries the prompt's ids, a later one not.
    std::vector<ChoiceStream> streams;
    pagoda::v1::GenerateResponse delta = response;
    delta.mutable_outputs(0)->set_text("");  // Held back: ids only.
    json first = MakeOpenAiChunk(*request, delta, "m", 1, nullptr, &streams);
    ASSERT_FALSE(first.is_null());
    AddPromptTokenIds(*request, {4, 5}, {true}, &first);
    EXPECT_EQ(first["choices"][0]["token_ids"], json({7, 8}));
    json later = MakeOpenAiChunk(*request, delta, "m", 1, nullptr, &streams);
    AddPromptTokenIds(*request, {4, 5}, {false}, &later);
    if (chat) {
      EXPECT_EQ(first["prompt_token_ids"], json({4, 5}));
      EXPECT_FALSE(later.contains("prompt_token_ids"));
    } else {
      EXPECT_EQ(first["choices"][0]["prompt_token_ids"], json({4, 5}));
      EXPECT_TRUE(later["choices"][0]["prompt_token_ids"].is_null());
    }
    // Without the field nothing changes: the held-back chunk is skipped.
    request->return_token_ids = false;
    std::vector<ChoiceStream> plain;
    EXPECT_TRUE(MakeOpenAiChunk(*request, delta, "m", 1, nullptr, &plain).is_null());
    EXPECT_FALSE(MakeOpenAiResponse(*request, response, "m", 1, nullptr)["choices"][0].contains(
        "token_ids"));
  }
}

// Under a reasoning parser the text before </think> is the reasoning and
// tool calls are read from the rest only, whole and streamed token by token.
TEST(OpenAiProtocolTest, ReasoningComesApartAndToolCallsComeFromTheContent) {
  const json body = json::parse(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "now"}}]})");
  absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(
      body, /*chat=*/true, 512, SamplingDefaults{}, nullptr, ToolCallParser::kHermes);
  ASSERT_TRUE(request.ok()) << request.status();
  request->reasoning =
      ReasoningMarkers{.start = "<think>", .end = "</think>", .start_id = 5, .end_id = 6};
  const std::vector<std::string> pieces = {"I could <tool_call>",
                                           " ask.",
                                           "</think>",
                                           "<tool_call>",
                                           R"({"name": "now", "arguments": {}})",
                                           "</tool_call>"};
  pagoda::v1::GenerateResponse whole;
  whole.set_request_id("r");
  pagoda::v1::SequenceOutput* output = whole.add_outputs();
  for (const std::string& piece : pieces) output->set_text(output->text() + piece);
  output->set_finish_reason(pagoda::v1::FINISH_REASON_STOP);
  const json message = MakeOpenAiResponse(*request, whole, "m", 1, nullptr)["choices"][0];
  EXPECT_EQ(message["message"]["reasoning"], "I could <tool_call> ask.");
  EXPECT_TRUE(message["message"]["content"].is_null());
  ASSERT_EQ(message["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(message["message"]["tool_calls"][0]["function"]["name"], "now");
  EXPECT_EQ(message["finish_reason"], "tool_calls");

  std::vector<ChoiceStream> streams;
  std::string reasoning;
  json calls;
  for (size_t i = 0; i < pieces.size(); ++i) {
    pagoda::v1::GenerateResponse delta;
    delta.set_request_id("r");
    delta.add_outputs()->set_text(pieces[i]);
    if (i + 1 == pieces.size())
      delta.mutable_outputs(0)->set_finish_reason(pagoda::v1::FINISH_REASON_STOP);
    const json chunk = MakeOpenAiChunk(*request, delta, "m", 1, nullptr, &streams);
    if (chunk.is_null()) continue;
    const json& streamed = chunk["choices"][0]["delta"];
    reasoning += streamed.value("reasoning", "");
    EXPECT_FALSE(streamed.contains("content")) << streamed;
    if (streamed.contains("tool_calls")) calls = streamed["tool_calls"];
  }
  EXPECT_EQ(reasoning, "I could <tool_call> ask.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "now");

  request->include_reasoning = false;
  EXPECT_TRUE(
      MakeOpenAiResponse(*request, whole, "m", 1, nullptr)["choices"][0]["message"]["reasoning"]
          .is_null());
}

// As vLLM hands messages to the chat template: text parts one per line, an
// assistant's reasoning also as reasoning_content, a name kept.
TEST(OpenAiProtocolTest, ChatMessagesReachTheTemplateAsVllmHandsThem) {
  const json body = json::parse(R"({"messages": [
      {"role": "user", "name": "ann", "content": [{"type": "text", "text": "a"},
                                                  {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": "c", "reasoning": "r"},
      {"role": "user", "content": "d"}]})");
  absl::StatusOr<OpenAiRequest> chat = ParseOpenAiRequest(body, /*chat=*/true, 512);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_EQ(chat->messages.size(), 3u);
  EXPECT_EQ(chat->messages[0].content, "a\nb");
  EXPECT_EQ(chat->messages[0].fields["name"], "ann");
  EXPECT_EQ(chat->messages[1].fields["reasoning"], "r");
  EXPECT_EQ(chat->messages[1].fields["reasoning_content"], "r");
  EXPECT_TRUE(chat->messages[2].fields.empty());
  json bad = body;
  bad["messages"][1]["reasoning"] = 5;
  EXPECT_EQ(ParseOpenAiRequest(bad, true, 512).status().message(),
            "messages[1]: reasoning must be a string");
}

// vLLM's reasoning_effort and documents become template variables
// (reasoning_effort also enable_thinking, unless chat_template_kwargs sets
// it); the deprecated reasoning_content of a message is its reasoning.
TEST(OpenAiProtocolTest, ReasoningEffortAndDocumentsAreTemplateVariables) {
  json body = json::parse(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "a", "reasoning_content": "r"},
      {"role": "user", "content": "q2"}],
      "reasoning_effort": "none", "documents": [{"title": "t", "text": "x"}]})");
  absl::StatusOr<OpenAiRequest> chat = ParseOpenAiRequest(body, true, 512);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->chat_template_kwargs["reasoning_effort"], "none");
  EXPECT_EQ(chat->chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(chat->chat_template_kwargs["documents"][0]["text"], "x");
  EXPECT_EQ(chat->messages[1].fields["reasoning"], "r");
  EXPECT_EQ(chat->messages[1].fields["reasoning_content"], "r");
  body["reasoning_effort"] = "high";
  body["chat_template_kwargs"] = {{"enable_thinking", false}};
  chat = ParseOpenAiRequest(body, true, 512);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->chat_template_kwargs["reasoning_effort"], "high");
  EXPECT_EQ(chat->chat_template_kwargs["enable_thinking"], false);  // The client's.
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"reasoning_effort", "extreme"},
                                                 {"reasoning_effort", 3},
                                                 {"documents", json::array({{{"title", 1}}})},
                                                 {"documents", "x"}}) {
    json bad = body;
    bad[field] = value;
    EXPECT_EQ(ParseOpenAiRequest(bad, true, 512).status().message().substr(0, field.size()), field);
  }
}

}  // namespace
}  // namespace pagoda::scheduler
