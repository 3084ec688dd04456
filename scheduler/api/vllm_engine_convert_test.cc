#include "scheduler/api/vllm_engine_convert.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

vllm_api::GenerateRequest TokenRequest() {
  vllm_api::GenerateRequest request;
  request.set_request_id("r1");
  for (uint32_t id : {5u, 6u, 7u}) request.mutable_tokenized()->add_input_ids(id);
  return request;
}

std::string RefusalOf(const vllm_api::GenerateRequest& request) {
  absl::StatusOr<VllmRequestPlan> plan = TranslateVllmRequest(request, 128);
  EXPECT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

TEST(VllmEngineConvertTest, MapsSamplingAndStopping) {
  vllm_api::GenerateRequest request = TokenRequest();
  request.set_stream(true);
  vllm_api::SamplingParams* s = request.mutable_sampling_params();
  s->set_temperature(0.5f);
  s->set_top_k(7);
  s->set_top_p(0.9f);
  s->set_max_tokens(12);
  s->set_min_tokens(2);
  s->add_stop("END");
  s->add_stop_token_ids(9);
  s->set_ignore_eos(true);
  s->set_n(3);
  s->set_seed(0);
  s->set_logprobs(0);
  (*s->mutable_logit_bias())[4] = 1.5f;
  absl::StatusOr<VllmRequestPlan> plan = TranslateVllmRequest(request, 128);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const pagoda::v1::GenerateRequest& out = plan->request;
  EXPECT_TRUE(plan->stream);
  EXPECT_EQ(out.request_id(), "r1");
  EXPECT_EQ(std::vector<int32_t>(out.prompt_token_ids().begin(), out.prompt_token_ids().end()),
            std::vector<int32_t>({5, 6, 7}));
  EXPECT_FLOAT_EQ(out.sampling().temperature(), 0.5f);
  EXPECT_EQ(out.sampling().top_k(), 7);
  EXPECT_FLOAT_EQ(out.sampling().top_p(), 0.9f);
  EXPECT_FALSE(out.sampling().has_min_p());  // vLLM's 0: unset.
  EXPECT_EQ(out.sampling().n(), 3);
  EXPECT_EQ(out.sampling().seed(), uint64_t{1} << 32);  // vLLM's seed 0 is a seed.
  EXPECT_FLOAT_EQ(out.sampling().logit_bias().at(4), 1.5f);
  EXPECT_EQ(out.stopping().max_tokens(), 12);
  EXPECT_EQ(out.stopping().min_tokens(), 2);
  EXPECT_EQ(out.stopping().stop(0), "END");
  EXPECT_EQ(out.stopping().stop_token_ids(0), 9);
  EXPECT_TRUE(out.stopping().ignore_eos());
  EXPECT_TRUE(plan->want_logprobs);
  EXPECT_EQ(plan->top_logprobs, 0);
  EXPECT_EQ(out.logprobs(), 1);
}

TEST(VllmEngineConvertTest, UnsetMaxTokensRunsToTheContextAndZerosAreUnset) {
  absl::StatusOr<VllmRequestPlan> plan = TranslateVllmRequest(TokenRequest(), 128);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->request.stopping().max_tokens(), 128);
  EXPECT_FALSE(plan->request.sampling().has_temperature());
  EXPECT_FALSE(plan->request.sampling().has_top_k());
  EXPECT_FALSE(plan->request.sampling().has_top_p());
  EXPECT_FALSE(plan->want_logprobs);
  EXPECT_EQ(plan->request.logprobs(), 0);
}

TEST(VllmEngineConvertTest, RefusesWhatPagodaCannotHonourNamingTheField) {
  vllm_api::GenerateRequest request = TokenRequest();
  request.mutable_sampling_params()->set_json_schema("{}");
  EXPECT_EQ(RefusalOf(request).rfind("sampling_params.json_schema: ", 0), 0u) << RefusalOf(request);
  request = TokenRequest();
  request.mutable_sampling_params()->mutable_choice()->add_choices("a");
  EXPECT_EQ(RefusalOf(request).rfind("sampling_params.choice: ", 0), 0u);
  request = TokenRequest();
  request.mutable_sampling_params()->set_prompt_logprobs(1);
  EXPECT_EQ(RefusalOf(request).rfind("sampling_params.prompt_logprobs: ", 0), 0u);
  request = TokenRequest();
  request.mutable_sampling_params()->set_logprobs(-1);
  EXPECT_EQ(RefusalOf(request).rfind("sampling_params.logprobs: ", 0), 0u);
  request = TokenRequest();
  request.mutable_sampling_params()->set_truncate_prompt_tokens(4);
  EXPECT_EQ(RefusalOf(request).rfind("sampling_params.truncate_prompt_tokens: ", 0), 0u);
  request = TokenRequest();
  request.mutable_mm_inputs()->add_image_data("x");
  EXPECT_EQ(RefusalOf(request).rfind("mm_inputs: ", 0), 0u);
  request = TokenRequest();
  request.mutable_kv_transfer_params()->set_remote_port(1);
  EXPECT_EQ(RefusalOf(request).rfind("kv_transfer_params: ", 0), 0u);
  request = TokenRequest();
  request.clear_tokenized();
  EXPECT_EQ(RefusalOf(request).rfind("input: ", 0), 0u);
}

pagoda::v1::GenerateResponse Delta(int index, std::vector<int32_t> tokens,
                                   pagoda::v1::FinishReason finish) {
  pagoda::v1::GenerateResponse delta;
  pagoda::v1::SequenceOutput* out = delta.add_outputs();
  out->set_index(index);
  for (int32_t t : tokens) {
    out->add_token_ids(t);
    pagoda::v1::TokenLogprobs* lp = out->add_logprobs();
    lp->set_token_id(t);
    lp->set_logprob(-0.5f);
    pagoda::v1::TokenLogprob* top = lp->add_top();
    top->set_token_id(t);
    top->set_logprob(-0.5f);
  }
  out->set_finish_reason(finish);
  return delta;
}

TEST(VllmEngineConvertTest, StreamSendsChunksThenACompleteWithTheLastDelta) {
  VllmRequestPlan plan;
  plan.stream = true;
  plan.want_logprobs = true;
  plan.top_logprobs = 1;
  VllmOutputConverter converter(plan, /*prompt_tokens=*/3, /*num_sequences=*/2);
  std::vector<vllm_api::GenerateResponse> out =
      converter.Convert(Delta(1, {10, 11}, pagoda::v1::FINISH_REASON_UNSPECIFIED));
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].has_chunk());
  EXPECT_EQ(out[0].chunk().index(), 1u);
  EXPECT_EQ(out[0].chunk().token_ids_size(), 2);
  EXPECT_EQ(out[0].chunk().completion_tokens(), 2u);
  EXPECT_EQ(out[0].chunk().prompt_tokens(), 3u);
  EXPECT_EQ(out[0].chunk().output_logprobs().token_logprobs_size(), 2);
  EXPECT_EQ(out[0].chunk().output_logprobs().top_logprobs(0).values_size(), 1);
  // The last delta, as vLLM's servicer sends it: a chunk (a router adds up
  // the chunks' tokens), then the complete repeating that delta.
  out = converter.Convert(Delta(1, {12}, pagoda::v1::FINISH_REASON_LENGTH));
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0].has_chunk());
  EXPECT_EQ(out[0].chunk().index(), 1u);
  EXPECT_EQ(
      std::vector<uint32_t>(out[0].chunk().token_ids().begin(), out[0].chunk().token_ids().end()),
      std::vector<uint32_t>({12}));
  EXPECT_EQ(out[0].chunk().output_logprobs().token_ids_size(), 1);
  ASSERT_TRUE(out[1].has_complete());
  EXPECT_EQ(out[1].complete().index(), 1u);
  EXPECT_EQ(out[1].complete().finish_reason(), "length");
  EXPECT_EQ(std::vector<uint32_t>(out[1].complete().output_ids().begin(),
                                  out[1].complete().output_ids().end()),
            std::vector<uint32_t>({12}));
  EXPECT_EQ(out[1].complete().output_logprobs().token_ids_size(), 1);
  EXPECT_EQ(out[1].complete().completion_tokens(), 3u);
  // Sequence 0 never ended: an abort ends it with an empty last delta.
  out = converter.AbortRemaining();
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[0].has_chunk());
  EXPECT_EQ(out[0].chunk().index(), 0u);
  EXPECT_EQ(out[0].chunk().token_ids_size(), 0);
  ASSERT_TRUE(out[1].has_complete());
  EXPECT_EQ(out[1].complete().index(), 0u);
  EXPECT_EQ(out[1].complete().finish_reason(), "abort");
}

TEST(VllmEngineConvertTest, StreamedChunksAddUpToEveryTokenOfEachSequence) {
  VllmRequestPlan plan;
  plan.stream = true;
  VllmOutputConverter converter(plan, 3, 2);
  std::vector<pagoda::v1::GenerateResponse> deltas = {
      Delta(0, {1}, pagoda::v1::FINISH_REASON_UNSPECIFIED),
      Delta(1, {2}, pagoda::v1::FINISH_REASON_UNSPECIFIED),
      Delta(0, {3, 4}, pagoda::v1::FINISH_REASON_STOP),
      Delta(1, {5}, pagoda::v1::FINISH_REASON_UNSPECIFIED),
      Delta(1, {6}, pagoda::v1::FINISH_REASON_LENGTH)};
  std::vector<std::vector<uint32_t>> from_chunks(2);
  std::vector<std::string> finish(2);
  for (const pagoda::v1::GenerateResponse& delta : deltas) {
    for (const vllm_api::GenerateResponse& message : converter.Convert(delta)) {
      if (message.has_chunk()) {
        std::vector<uint32_t>& seq = from_chunks.at(message.chunk().index());
        seq.insert(seq.end(), message.chunk().token_ids().begin(),
                   message.chunk().token_ids().end());
      } else {
        finish.at(message.complete().index()) = message.complete().finish_reason();
      }
    }
  }
  EXPECT_EQ(from_chunks[0], std::vector<uint32_t>({1, 3, 4}));
  EXPECT_EQ(from_chunks[1], std::vector<uint32_t>({2, 5, 6}));
  EXPECT_EQ(finish, std::vector<std::string>({"stop", "length"}));
}

TEST(VllmEngineConvertTest, WithoutStreamOneCompleteWithEveryToken) {
  VllmRequestPlan plan;
  VllmOutputConverter converter(plan, 3, 1);
  EXPECT_TRUE(converter.Convert(Delta(0, {10}, pagoda::v1::FINISH_REASON_UNSPECIFIED)).empty());
  std::vector<vllm_api::GenerateResponse> out =
      converter.Convert(Delta(0, {11, 2}, pagoda::v1::FINISH_REASON_STOP));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].complete().output_ids_size(), 3);
  EXPECT_EQ(out[0].complete().finish_reason(), "stop");
  EXPECT_FALSE(out[0].complete().has_output_logprobs());
  EXPECT_TRUE(converter.AbortRemaining().empty());
}

}  // namespace
}  // namespace pagoda::scheduler
