#include "scheduler/api/request_log.h"

#include <string>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

ValidatedRequest Request() {
  ValidatedRequest request;
  request.request_id = "cmpl-7";
  request.prompt_token_ids = {5, 6, 7, 8};
  request.sampling.temperature = 0.5f;
  request.sampling.top_k = 20;
  request.sampling.seed = 42;
  request.sampling.num_logprobs = 2;
  request.sampling.bad_words_token_ids = {{3}, {4, 9}};
  request.stopping.max_tokens = 16;
  request.stopping.stop_token_ids = {2};
  request.stop_strings = {"\n\n", "it's"};
  return request;
}

// vLLM's RequestLogger lines, with vLLM's SamplingParams repr order.
TEST(RequestLogTest, TheReceivedLineNamesTheOptionsAsVllmDoes) {
  EXPECT_EQ(ReceivedRequestLine(Request()),
            "Received request cmpl-7: params: SamplingParams(n=1, presence_penalty=0.0, "
            "frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.5, top_p=1.0, "
            "top_k=20, min_p=0.0, seed=42, stop=['\\n\\n', \"it's\"], stop_token_ids=[2], "
            "bad_words=[[3], [4, 9]], include_stop_str_in_output=False, ignore_eos=False, "
            "max_tokens=16, min_tokens=0, logprobs=2, prompt_logprobs=None, "
            "structured_outputs=None, use_beam_search=False), lora_request: None.");
  ValidatedRequest adapter = Request();
  adapter.lora_name = "sql";
  EXPECT_TRUE(
      ReceivedRequestLine(adapter).ends_with(", lora_request: LoRARequest(lora_name='sql')."));
}

TEST(RequestLogTest, DetailsAndOutputsAreCutToMaxLogLen) {
  EXPECT_EQ(RequestDetailsLine(Request(), nullptr, -1),
            "Request cmpl-7 details: prompt: None, prompt_token_ids: [5, 6, 7, 8], "
            "prompt_embeds shape: None.");
  EXPECT_EQ(RequestDetailsLine(Request(), nullptr, 2),
            "Request cmpl-7 details: prompt: None, prompt_token_ids: [5, 6], "
            "prompt_embeds shape: None.");
  EXPECT_EQ(GeneratedResponseLine("cmpl-7", "héllo\tworld", pagoda::v1::FINISH_REASON_LENGTH, 3),
            "Generated response cmpl-7: output: 'hél', finish_reason: length");
  EXPECT_EQ(GeneratedResponseLine("c", "done", pagoda::v1::FINISH_REASON_STOP, -1),
            "Generated response c: output: 'done', finish_reason: stop");
}

// Python's repr() of a str (checked against CPython 3.11).
TEST(RequestLogTest, PythonReprQuotesAndEscapesAsPythonDoes) {
  EXPECT_EQ(PythonRepr("plain"), "'plain'");
  EXPECT_EQ(PythonRepr("it's"), "\"it's\"");
  EXPECT_EQ(PythonRepr("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(PythonRepr("it's \"x\""), "'it\\'s \"x\"'");
  EXPECT_EQ(PythonRepr("a\\b\nc\rd\te\x01\x7f"), "'a\\\\b\\nc\\rd\\te\\x01\\x7f'");
  EXPECT_EQ(PythonRepr("caf\xc3\xa9"), "'caf\xc3\xa9'");
}

}  // namespace
}  // namespace pagoda::scheduler
