#include "scheduler/engine/sequence.h"

#include <utility>

#include "glog/logging.h"

namespace pagoda::scheduler {

bool IsFinished(SequenceStatus status) {
  switch (status) {
    case SequenceStatus::kWaiting:
    case SequenceStatus::kRunning:
    case SequenceStatus::kSwapped:
      return false;
    case SequenceStatus::kFinishedStopped:
    case SequenceStatus::kFinishedLength:
    case SequenceStatus::kFinishedAborted:
    case SequenceStatus::kFinishedIgnored:
      return true;
  }
  return true;
}

Sequence::Sequence(int64_t seq_id, std::vector<int32_t> prompt_token_ids)
    : seq_id_(seq_id), prompt_token_ids_(std::move(prompt_token_ids)) {}

int32_t Sequence::token_at(int i) const {
  DCHECK_GE(i, 0);
  DCHECK_LT(i, length());
  if (i < num_prompt_tokens()) return prompt_token_ids_[i];
  return output_[i - num_prompt_tokens()].token_id;
}

void Sequence::AppendToken(GeneratedToken token) {
  cumulative_logprob_ += token.logprob;
  output_.push_back(std::move(token));
}

std::unique_ptr<Sequence> Sequence::Fork(int64_t child_seq_id) const {
  auto child = std::make_unique<Sequence>(*this);
  child->seq_id_ = child_seq_id;
  return child;
}

SequenceGroup::SequenceGroup(std::string request_id, std::vector<int32_t> prompt_token_ids,
                             int64_t first_seq_id, SamplingOptions sampling,
                             StoppingOptions stopping, absl::Time arrival_time)
    : request_id_(std::move(request_id)),
      sampling_(std::move(sampling)),
      stopping_(std::move(stopping)),
      arrival_time_(arrival_time) {
  seqs_.push_back(std::make_unique<Sequence>(first_seq_id, std::move(prompt_token_ids)));
}

std::vector<Sequence*> SequenceGroup::SeqsWithStatus(SequenceStatus status) const {
  std::vector<Sequence*> result;
  for (const auto& seq : seqs_) {
    if (seq->status() == status) result.push_back(seq.get());
  }
  return result;
}

int SequenceGroup::NumUnfinished() const {
  int count = 0;
  for (const auto& seq : seqs_) {
    if (!pagoda::scheduler::IsFinished(seq->status())) ++count;
  }
  return count;
}

Sequence* SequenceGroup::AddForkedSequence(const Sequence& parent, int64_t child_seq_id) {
  seqs_.push_back(parent.Fork(child_seq_id));
  return seqs_.back().get();
}

}  // namespace pagoda::scheduler
