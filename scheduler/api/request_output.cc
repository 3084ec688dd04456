#include "scheduler/api/request_output.h"

#include <utility>

namespace pagoda::scheduler {

pagoda::v1::FinishReason ToFinishReason(SequenceStatus status) {
  switch (status) {
    case SequenceStatus::kFinishedStopped:
      return pagoda::v1::FINISH_REASON_STOP;
    case SequenceStatus::kFinishedLength:
      return pagoda::v1::FINISH_REASON_LENGTH;
    case SequenceStatus::kFinishedAborted:
    case SequenceStatus::kFinishedIgnored:
      return pagoda::v1::FINISH_REASON_ABORTED;
    default:
      return pagoda::v1::FINISH_REASON_UNSPECIFIED;
  }
}

RequestOutput::RequestOutput(std::string request_id, int prompt_token_count,
                             const Tokenizer* tokenizer)
    : tokenizer_(tokenizer) {
  whole_.set_request_id(std::move(request_id));
  whole_.set_prompt_token_count(prompt_token_count);
}

pagoda::v1::SequenceOutput* RequestOutput::WholeSequence(int index) {
  while (whole_.outputs_size() <= index) {
    whole_.add_outputs()->set_index(whole_.outputs_size() - 1);
    detokenizers_.emplace_back(tokenizer_);
  }
  return whole_.mutable_outputs(index);
}

pagoda::v1::GenerateResponse RequestOutput::AddDelta(const RequestDelta& delta) {
  pagoda::v1::GenerateResponse message;
  message.set_request_id(whole_.request_id());
  message.set_prompt_token_count(whole_.prompt_token_count());
  for (const RequestDelta::SeqDelta& seq : delta.seqs) {
    pagoda::v1::SequenceOutput* whole = WholeSequence(seq.index);
    pagoda::v1::SequenceOutput* out = message.add_outputs();
    out->set_index(seq.index);
    std::vector<int32_t> ids;
    for (const GeneratedToken& token : seq.new_tokens) {
      ids.push_back(token.token_id);
      out->add_token_ids(token.token_id);
      whole->add_token_ids(token.token_id);
      whole->set_cumulative_logprob(whole->cumulative_logprob() + token.logprob);
      pagoda::v1::TokenLogprobs logprobs;
      logprobs.set_token_id(token.token_id);
      logprobs.set_logprob(token.logprob);
      for (const TopLogprob& top : token.top) {
        pagoda::v1::TokenLogprob* entry = logprobs.add_top();
        entry->set_token_id(top.token_id);
        entry->set_logprob(top.logprob);
      }
      if (!token.top.empty()) {
        *out->add_logprobs() = logprobs;
        *whole->add_logprobs() = std::move(logprobs);
      }
    }
    RequestDetokenizer& detokenizer = detokenizers_[seq.index];
    std::string text = detokenizer.Append(ids);
    const pagoda::v1::FinishReason reason = ToFinishReason(seq.status);
    if (reason != pagoda::v1::FINISH_REASON_UNSPECIFIED) text += detokenizer.Flush();
    out->set_text(text);
    whole->mutable_text()->append(text);
    out->set_finish_reason(reason);
    whole->set_finish_reason(reason);
    out->set_cumulative_logprob(whole->cumulative_logprob());
  }
  return message;
}

}  // namespace pagoda::scheduler
