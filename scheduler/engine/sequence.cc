#include "scheduler/engine/sequence.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

// The status of a group's sequences in a block-manager phase.
SequenceStatus StatusOfPhase(KvPhase phase) {
  return phase == KvPhase::kWaiting   ? SequenceStatus::kWaiting
         : phase == KvPhase::kRunning ? SequenceStatus::kRunning
                                      : SequenceStatus::kSwapped;
}

}  // namespace

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
  for (; num_counted_output_tokens_ < known; ++num_counted_output_tokens_) {
    ++output_token_counts_[output_[num_counted_output_tokens_].token_id];
  }
  return output_token_counts_;
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
  if (sampling_.repetition_penalty != 1.0f) {
    distinct_prompt_tokens_ = prompt_token_ids;
    std::sort(distinct_prompt_tokens_.begin(), distinct_prompt_tokens_.end());
    distinct_prompt_tokens_.erase(
        std::unique(distinct_prompt_tokens_.begin(), distinct_prompt_tokens_.end()),
        distinct_prompt_tokens_.end());
  }
  seqs_.push_back(std::make_unique<Sequence>(first_seq_id, std::move(prompt_token_ids)));
}

std::vector<Sequence*> SequenceGroup::SeqsWithStatus(SequenceStatus status) const {
  std::vector<Sequence*> result;
  result.reserve(seqs_.size());  // One allocation, not a growth per sequence.
  for (const auto& seq : seqs_) {
    if (seq->status() == status) result.push_back(seq.get());
  }
  return result;
}

std::vector<const KvSequence*> SequenceGroup::SequencesIn(KvPhase phase) const {
  const SequenceStatus status = StatusOfPhase(phase);
  // Called for every running group at every step (BlocksToAppendSlots):
  // built in place, one allocation.
  std::vector<const KvSequence*> result;
  result.reserve(seqs_.size());
  for (const auto& seq : seqs_) {
    if (seq->status() == status) result.push_back(seq.get());
  }
  return result;
}

void SequenceGroup::ForEachSequenceIn(KvPhase phase,
                                      absl::FunctionRef<void(const KvSequence&)> fn) const {
  const SequenceStatus status = StatusOfPhase(phase);
  for (const auto& seq : seqs_) {
    if (seq->status() == status) fn(*seq);
  }
}

int SequenceGroup::NumUnfinished() const {
  return static_cast<int>(std::count_if(seqs_.begin(), seqs_.end(), [](const auto& seq) {
    return !pagoda::scheduler::IsFinished(seq->status());
  }));
}

void SequenceGroup::AddPromptLogprobs(int first_position, std::vector<GeneratedToken> entries) {
  const int prompt_len = seqs_.front()->num_prompt_tokens();
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    const int position = first_position + i;
    const int next_missing = static_cast<int>(prompt_logprobs_.size()) + 1;
    if (position >= prompt_len || position > next_missing) break;
    if (position == next_missing) prompt_logprobs_.push_back(std::move(entries[i]));
  }
}

std::vector<GeneratedToken> SequenceGroup::TakeNewPromptLogprobs() {
  std::vector<GeneratedToken> fresh(prompt_logprobs_.begin() + prompt_logprobs_taken_,
                                    prompt_logprobs_.end());
  prompt_logprobs_taken_ = prompt_logprobs_.size();
  return fresh;
}

void SequenceGroup::set_lora_id(int lora_id) {
  for (const std::unique_ptr<Sequence>& seq : seqs_) seq->lora_id_ = lora_id;
}

Sequence* SequenceGroup::AddForkedSequence(const Sequence& parent, int64_t child_seq_id) {
  seqs_.push_back(parent.Fork(child_seq_id));
  seqs_.back()->index_in_group_ = static_cast<int>(seqs_.size()) - 1;
  return seqs_.back().get();
}

}  // namespace pagoda::scheduler
