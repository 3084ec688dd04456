#include "scheduler/api/request_output.h"

#include <utility>

#include "glog/logging.h"
#include "scheduler/api/request_log.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler {
namespace {

pagoda::v1::TokenLogprobs ToTokenLogprobs(const GeneratedToken& token) {
  pagoda::v1::TokenLogprobs logprobs;
  logprobs.set_token_id(token.token_id);
  logprobs.set_logprob(token.logprob);
  for (const TopLogprob& top : token.top) {
    pagoda::v1::TokenLogprob* entry = logprobs.add_top();
    entry->set_token_id(top.token_id);
    entry->set_logprob(top.logprob);
  }
  return logprobs;
}

}  // namespace

RequestOutput::RequestOutput(std::string request_id, int prompt_token_count,
                             const Tokenizer* tokenizer, OutputOptions options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  whole_.set_request_id(std::move(request_id));
  whole_.set_prompt_token_count(prompt_token_count);
}

pagoda::v1::SequenceOutput* RequestOutput::WholeSequence(int index) {
  while (whole_.outputs_size() <= index) {
    whole_.add_outputs()->set_index(whole_.outputs_size() - 1);
    sequences_.push_back(SequenceState{
        RequestDetokenizer(tokenizer_),
        StopStringMatcher(options_.stop_strings, options_.include_stop_str_in_output)});
  }
  return whole_.mutable_outputs(index);
}

pagoda::v1::GenerateResponse RequestOutput::AddDelta(const RequestDelta& delta) {
  pagoda::v1::GenerateResponse message;
  message.set_request_id(whole_.request_id());
  message.set_prompt_token_count(whole_.prompt_token_count());
  Accumulate(delta, &message);
  return message;
}

void RequestOutput::AccumulateDelta(const RequestDelta& delta) { Accumulate(delta, nullptr); }

void RequestOutput::Accumulate(const RequestDelta& delta, pagoda::v1::GenerateResponse* message) {
  whole_.set_cached_prompt_token_count(delta.num_cached_tokens);
  if (message != nullptr) message->set_cached_prompt_token_count(delta.num_cached_tokens);
  for (const GeneratedToken& token : delta.prompt_logprobs) {
    if (message != nullptr) *message->add_prompt_logprobs() = ToTokenLogprobs(token);
    *whole_.add_prompt_logprobs() = ToTokenLogprobs(token);
  }
  for (const RequestDelta::SeqDelta& seq : delta.seqs) {
    WholeSequence(seq.index);
    // Tokens the engine made after a stop string ended the sequence.
    if (sequences_[seq.index].finished) continue;
    AddSequenceDelta(seq, message != nullptr ? message->add_outputs() : nullptr);
  }
}

void RequestOutput::AddSequenceDelta(const RequestDelta::SeqDelta& seq,
                                     pagoda::v1::SequenceOutput* out) {
  pagoda::v1::SequenceOutput* whole = WholeSequence(seq.index);
  SequenceState& state = sequences_[seq.index];
  if (out != nullptr) out->set_index(seq.index);
  pagoda::v1::FinishReason reason = ToFinishReason(seq.status);
  // Token by token: a delta holds several after speculative decoding, and
  // none past the one that completes a stop string is kept (plain decoding
  // would never have made them).
  std::string text;
  for (size_t i = 0; i < seq.new_tokens.size() && !state.stop_matcher.stopped(); ++i) {
    const GeneratedToken& token = seq.new_tokens[i];
    if (out != nullptr) out->add_token_ids(token.token_id);
    whole->add_token_ids(token.token_id);
    whole->set_cumulative_logprob(whole->cumulative_logprob() + token.logprob);
    if (!token.top.empty()) {
      pagoda::v1::TokenLogprobs logprobs = ToTokenLogprobs(token);
      if (out != nullptr) *out->add_logprobs() = logprobs;
      *whole->add_logprobs() = std::move(logprobs);
    }
    // The EOS or stop token that ended the sequence stays in token_ids but
    // adds no text (as vLLM), unless include_stop_str_in_output: a
    // structured output must end where its grammar does.
    const bool ending_stop = i + 1 == seq.new_tokens.size() &&
                             seq.status == SequenceStatus::kFinishedStopped &&
                             !options_.include_stop_str_in_output;
    if (!ending_stop) text += state.stop_matcher.Append(state.detokenizer.Append({token.token_id}));
  }
  if (reason != pagoda::v1::FINISH_REASON_UNSPECIFIED && !state.stop_matcher.stopped()) {
    text += state.stop_matcher.Append(state.detokenizer.Flush());
  }
  if (state.stop_matcher.stopped()) {
    reason = pagoda::v1::FINISH_REASON_STOP;
    stopped_by_string_ = true;
  } else if (reason != pagoda::v1::FINISH_REASON_UNSPECIFIED) {
    text += state.stop_matcher.Flush();
  }
  if (reason != pagoda::v1::FINISH_REASON_UNSPECIFIED) {
    state.finished = true;
    ++num_finished_;
  }
  whole->mutable_text()->append(text);
  whole->set_finish_reason(reason);
  if (state.finished && options_.log_outputs) {
    LOG(INFO) << GeneratedResponseLine(whole_.request_id(), whole->text(), reason,
                                       options_.max_log_len);
  }
  if (out == nullptr) return;
  out->set_text(std::move(text));
  out->set_finish_reason(reason);
  out->set_cumulative_logprob(whole->cumulative_logprob());
}

bool RequestOutput::TakeStopAbort() {
  if (stop_abort_state_ || !stopped_by_string_ || num_finished_ < options_.num_sequences) {
    return false;
  }
  stop_abort_state_ = true;
  return true;
}

absl::Status RequestOutput::FinalStatus(const absl::Status& engine_status) const {
  if (stop_abort_state_ && absl::IsCancelled(engine_status)) return absl::OkStatus();
  return engine_status;
}

}  // namespace pagoda::scheduler
