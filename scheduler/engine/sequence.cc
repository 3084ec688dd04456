#include "scheduler/engine/sequence.h"

#include <algorithm>
#include <utility>

#include "absl/types/span.h"
#include "glog/logging.h"

namespace pagoda::scheduler {

Sequence::Sequence(int64_t seq_id, std::vector<int32_t> prompt_token_ids)
    : seq_id_(seq_id), prompt_token_ids_(std::move(prompt_token_ids)) {}

int32_t Sequence::token_at(int i) const {
  DCHECK_GE(i, 0);
  DCHECK_LT(i, length());
  if (i < num_prompt_tokens()) return prompt_token_ids_[i];
  return output_[i - num_prompt_tokens()].token_id;
}

void Sequence::AppendToken(GeneratedToken token) {
  DCHECK(!has_pending_token_) << "sequence " << seq_id_ << ": a token after a placeholder";
  cumulative_logprob_ += token.logprob;
  output_.push_back(std::move(token));
}

void Sequence::AppendPlaceholder() {
  CHECK(!has_pending_token_) << "sequence " << seq_id_ << " has a token in flight already";
  output_.push_back(GeneratedToken{kPlaceholderToken, 0.0f, {}});
  has_pending_token_ = true;
}

void Sequence::RemovePlaceholder() {
  CHECK(has_pending_token_) << "sequence " << seq_id_ << " has no token in flight";
  output_.pop_back();
  has_pending_token_ = false;
}

const absl::flat_hash_map<int32_t, int32_t>& Sequence::output_token_counts() const {
  // The placeholder is never counted: the server does not know its token.
  const size_t known = output_.size() - (has_pending_token_ ? 1 : 0);
  return output_token_counts_.CountThrough(absl::MakeConstSpan(output_).first(known));
}

SequenceGroup::SequenceGroup(std::string request_id, std::vector<int32_t> prompt_token_ids,
                             int64_t first_seq_id, SamplingOptions sampling,
                             StoppingOptions stopping, absl::Time arrival_time)
    : request_id_(std::move(request_id)),
      sampling_(std::move(sampling)),
      stopping_(std::move(stopping)),
      prompt_logprobs_(static_cast<int>(prompt_token_ids.size())),
      arrival_time_(arrival_time) {
  if (sampling_.repetition_penalty != 1.0f) {
    distinct_prompt_tokens_ = DistinctTokens(prompt_token_ids);
  }
  seqs_.push_back(std::make_unique<Sequence>(first_seq_id, std::move(prompt_token_ids)));
}

absl::InlinedVector<Sequence*, 1> SequenceGroup::SeqsWithStatus(SequenceStatus status) const {
  absl::InlinedVector<Sequence*, 1> result;
  for (const auto& seq : seqs_) {
    if (seq->status() == status) result.push_back(seq.get());
  }
  return result;
}

absl::InlinedVector<const KvSequence*, 1> SequenceGroup::SequencesIn(KvPhase phase) const {
  const SequenceStatus status = phase == KvPhase::kWaiting   ? SequenceStatus::kWaiting
                                : phase == KvPhase::kRunning ? SequenceStatus::kRunning
                                                             : SequenceStatus::kSwapped;
  const auto seqs = SeqsWithStatus(status);
  return {seqs.begin(), seqs.end()};
}

int SequenceGroup::NumUnfinished() const {
  return static_cast<int>(std::count_if(seqs_.begin(), seqs_.end(), [](const auto& seq) {
    return !pagoda::scheduler::IsFinished(seq->status());
  }));
}

void SequenceGroup::set_lora_id(int lora_id) {
  for (const std::unique_ptr<Sequence>& seq : seqs_) seq->lora_id_ = lora_id;
}

Sequence* SequenceGroup::AddForkedSequence(const Sequence& parent, int64_t child_seq_id) {
  seqs_.push_back(std::make_unique<Sequence>(parent));
  seqs_.back()->seq_id_ = child_seq_id;
  seqs_.back()->index_in_group_ = static_cast<int>(seqs_.size()) - 1;
  return seqs_.back().get();
}

}  // namespace pagoda::scheduler
