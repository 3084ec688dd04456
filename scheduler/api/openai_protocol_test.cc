#include "scheduler/api/openai_protocol.h"

#include <string>

#include "gtest/gtest.h"

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
  EXPECT_EQ(request.sampling().n(), 3);
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

TEST(OpenAiProtocolTest, BadFieldsAreInvalidArgumentNamingTheField) {
  const json base = {{"model", "m"}, {"prompt", "hi"}};
  struct Case {
    const char* field;
    json value;
  } cases[] = {{"max_tokens", -1},
               {"max_tokens", "8"},
               {"temperature", 3},
               {"top_p", 0},
               {"n", 0},
               {"seed", -5},
               {"stop", 5},
               {"stop", json::array({1})},
               {"logprobs", 21},
               {"stream", "yes"},
               {"presence_penalty", 0.5},
               {"logit_bias", {{"1", 2}}},
               {"prompt", json::array()},
               {"prompt", json::array({-1})}};
  for (const Case& c : cases) {
    json body = base;
    body[c.field] = c.value;
    const absl::Status status = ParseError(body);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field << " " << c.value;
    EXPECT_EQ(status.message().rfind(c.field, 0), 0u) << status;
  }
  EXPECT_FALSE(ParseError(json{{"prompt", "hi"}}).ok());  // No model.
  EXPECT_FALSE(ParseError(json::array()).ok());
  EXPECT_FALSE(ParseError(json{{"model", "m"}, {"messages", json::array()}}, true).ok());
  EXPECT_FALSE(
      ParseError(json{{"model", "m"}, {"stream_options", json::object()}, {"prompt", "x"}}).ok());
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
}

}  // namespace
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

}  // namespace
}  // namespace pagoda::scheduler
