#include "scheduler/api/vllm_engine_convert.h"

#include <algorithm>
#include <climits>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"
#include "scheduler/api/field_error.h"
#include "scheduler/engine/finish_reason.h"

namespace pagoda::scheduler {
namespace {

// The fields of SamplingParams that Pagoda refuses, if set.
absl::Status CheckUnsupportedSampling(const vllm_api::SamplingParams& in) {
  if (in.constraint_case() != vllm_api::SamplingParams::CONSTRAINT_NOT_SET) {
    const std::string name = vllm_api::SamplingParams::descriptor()
                                 ->FindFieldByNumber(static_cast<int>(in.constraint_case()))
                                 ->name();
    return InvalidField(absl::StrCat("sampling_params.", name),
                        "structured outputs are not supported by this server");
  }
  if (in.has_prompt_logprobs()) {
    return InvalidField("sampling_params.prompt_logprobs", "prompt logprobs are not supported");
  }
  if (in.has_truncate_prompt_tokens()) {
    return InvalidField("sampling_params.truncate_prompt_tokens",
                        "prompt truncation is not supported");
  }
  if (in.has_logprobs() && (in.logprobs() < 0 || in.logprobs() > kMaxTopLogprobs)) {
    return InvalidField("sampling_params.logprobs", absl::StrCat("must be in [0, ", kMaxTopLogprobs,
                                                                 "] (-1, all, is not "
                                                                 "supported), got ",
                                                                 in.logprobs()));
  }
  return absl::OkStatus();
}

void TranslateSampling(const vllm_api::SamplingParams& in, int max_model_len,
                       VllmRequestPlan& plan) {
  pagoda::v1::SamplingParams* s = plan.request.mutable_sampling();
  pagoda::v1::StoppingCriteria* stop = plan.request.mutable_stopping();
  // vLLM's proto3 zeros mean "unset": leave them to the model's defaults.
  if (in.has_temperature()) s->set_temperature(in.temperature());
  if (in.top_p() != 0) s->set_top_p(in.top_p());
  if (in.top_k() != 0) s->set_top_k(static_cast<int32_t>(std::min<uint32_t>(in.top_k(), 1 << 30)));
  if (in.min_p() != 0) s->set_min_p(in.min_p());
  if (in.repetition_penalty() != 0) s->set_repetition_penalty(in.repetition_penalty());
  s->set_frequency_penalty(in.frequency_penalty());
  s->set_presence_penalty(in.presence_penalty());
  s->set_n(static_cast<int32_t>(std::min<uint32_t>(in.n(), 1 << 20)));
  // Pagoda's seed 0 means "the server picks": vLLM's 0 is a seed like any.
  if (in.has_seed()) {
    const uint64_t seed = static_cast<uint32_t>(in.seed());
    s->set_seed(seed == 0 ? uint64_t{1} << 32 : seed);
  }
  for (const auto& [token, bias] : in.logit_bias()) (*s->mutable_logit_bias())[token] = bias;
  stop->set_max_tokens(in.has_max_tokens()
                           ? static_cast<int32_t>(std::min<uint32_t>(in.max_tokens(), 1 << 30))
                           : max_model_len);
  stop->set_min_tokens(static_cast<int32_t>(std::min<uint32_t>(in.min_tokens(), 1 << 30)));
  for (const std::string& text : in.stop()) stop->add_stop(text);
  for (uint32_t id : in.stop_token_ids()) {
    stop->add_stop_token_ids(id > INT32_MAX ? -1 : static_cast<int32_t>(id));
  }
  stop->set_ignore_eos(in.ignore_eos());
  stop->set_include_stop_str_in_output(in.include_stop_str_in_output());
  if (in.has_logprobs()) {
    plan.want_logprobs = true;
    plan.top_logprobs = in.logprobs();
    // Pagoda returns the sampled token's logprob with at least one top entry.
    plan.request.set_logprobs(std::max(1, in.logprobs()));
  }
}

}  // namespace

absl::StatusOr<VllmRequestPlan> TranslateVllmRequest(const vllm_api::GenerateRequest& in,
                                                     int max_model_len) {
  if (in.has_kv_transfer_params()) {
    return InvalidField("kv_transfer_params", "disaggregated prefill is not supported");
  }
  if (in.has_mm_inputs()) return InvalidField("mm_inputs", "multimodal inputs are not supported");
  if (absl::Status status = CheckUnsupportedSampling(in.sampling_params()); !status.ok()) {
    return status;
  }
  VllmRequestPlan plan;
  plan.stream = in.stream();
  plan.request.set_request_id(in.request_id());
  switch (in.input_case()) {
    case vllm_api::GenerateRequest::kTokenized:
      for (uint32_t id : in.tokenized().input_ids()) {
        // Ids past int32 are out of every vocabulary; -1 is refused as such.
        plan.request.add_prompt_token_ids(id > INT32_MAX ? -1 : static_cast<int32_t>(id));
      }
      if (plan.request.prompt_token_ids().empty()) {
        return InvalidField("tokenized.input_ids", "must not be empty");
      }
      break;
    case vllm_api::GenerateRequest::kText:
      if (in.text().empty()) return InvalidField("text", "must not be empty");
      plan.request.set_prompt(in.text());
      break;
    case vllm_api::GenerateRequest::INPUT_NOT_SET:
      return InvalidField("input", "set tokenized or text");
  }
  TranslateSampling(in.sampling_params(), max_model_len, plan);
  return plan;
}

VllmOutputConverter::VllmOutputConverter(const VllmRequestPlan& plan, int prompt_tokens,
                                         int num_sequences)
    : stream_(plan.stream),
      want_logprobs_(plan.want_logprobs),
      top_logprobs_(plan.top_logprobs),
      prompt_tokens_(static_cast<uint32_t>(prompt_tokens)),
      sequences_(std::max(1, num_sequences)) {}

void VllmOutputConverter::FillLogprobs(const pagoda::v1::SequenceOutput& from,
                                       vllm_api::OutputLogProbs* to) const {
  for (const pagoda::v1::TokenLogprobs& token : from.logprobs()) {
    to->add_token_logprobs(token.logprob());
    to->add_token_ids(static_cast<uint32_t>(token.token_id()));
    vllm_api::TopLogProbs* top = to->add_top_logprobs();
    for (int i = 0; i < token.top_size() && i < top_logprobs_; ++i) {
      top->add_values(token.top(i).logprob());
      top->add_token_ids(static_cast<uint32_t>(token.top(i).token_id()));
    }
  }
}

vllm_api::GenerateResponse VllmOutputConverter::Chunk(int index, const Sequence& seq) const {
  vllm_api::GenerateResponse out;
  vllm_api::GenerateStreamChunk* chunk = out.mutable_chunk();
  chunk->mutable_token_ids()->Add(seq.tokens.begin(), seq.tokens.end());
  chunk->set_prompt_tokens(prompt_tokens_);
  chunk->set_completion_tokens(seq.count);
  chunk->set_cached_tokens(cached_tokens_);
  chunk->set_index(static_cast<uint32_t>(index));
  if (want_logprobs_) FillLogprobs(seq.logprobs, chunk->mutable_output_logprobs());
  return out;
}

vllm_api::GenerateResponse VllmOutputConverter::Complete(int index, Sequence& seq,
                                                         std::string_view finish_reason) {
  vllm_api::GenerateResponse out;
  vllm_api::GenerateComplete* complete = out.mutable_complete();
  complete->mutable_output_ids()->Add(seq.tokens.begin(), seq.tokens.end());
  complete->set_finish_reason(std::string(finish_reason));
  complete->set_prompt_tokens(prompt_tokens_);
  complete->set_completion_tokens(seq.count);
  complete->set_cached_tokens(cached_tokens_);
  complete->set_index(static_cast<uint32_t>(index));
  if (want_logprobs_) FillLogprobs(seq.logprobs, complete->mutable_output_logprobs());
  seq.tokens.clear();
  seq.logprobs.Clear();
  seq.ended = true;
  return out;
}

std::vector<vllm_api::GenerateResponse> VllmOutputConverter::Convert(
    const pagoda::v1::GenerateResponse& delta) {
  std::vector<vllm_api::GenerateResponse> out;
  cached_tokens_ = static_cast<uint32_t>(std::max(0, delta.cached_prompt_token_count()));
  for (const pagoda::v1::SequenceOutput& piece : delta.outputs()) {
    const int index = piece.index();
    if (index < 0) continue;
    if (index >= static_cast<int>(sequences_.size())) sequences_.resize(index + 1);
    Sequence& seq = sequences_[index];
    if (seq.ended) continue;
    for (int32_t id : piece.token_ids()) seq.tokens.push_back(static_cast<uint32_t>(id));
    seq.count += static_cast<uint32_t>(piece.token_ids_size());
    for (const auto& token : piece.logprobs()) *seq.logprobs.add_logprobs() = token;
    // vLLM's names are the engine's ("stop", "length", "abort"); empty while
    // the sequence runs.
    const std::string_view finish_reason = FinishReasonName(piece.finish_reason());
    // As vLLM's servicer: with stream, every delta is a chunk, a sequence's
    // last one included (a router adds up the chunks' tokens), and the
    // complete that follows repeats that last delta.
    if (stream_ && (!finish_reason.empty() || !seq.tokens.empty())) {
      out.push_back(Chunk(index, seq));
    }
    if (!finish_reason.empty()) {
      out.push_back(Complete(index, seq, finish_reason));
    } else if (stream_) {
      seq.tokens.clear();
      seq.logprobs.Clear();
    }
  }
  return out;
}

std::vector<vllm_api::GenerateResponse> VllmOutputConverter::AbortRemaining() {
  std::vector<vllm_api::GenerateResponse> out;
  for (int index = 0; index < static_cast<int>(sequences_.size()); ++index) {
    if (sequences_[index].ended) continue;
    if (stream_) out.push_back(Chunk(index, sequences_[index]));
    out.push_back(
        Complete(index, sequences_[index], FinishReasonName(pagoda::v1::FINISH_REASON_ABORTED)));
  }
  return out;
}

}  // namespace pagoda::scheduler
