#include "worker/eagle_features.h"

#include <cstring>

namespace pagoda::worker {

void EagleFeatures::Capture(const FlatBatch& batch, const void* rows, Backend* backend) {
  hidden_.resize(static_cast<size_t>(batch.num_tokens()) * row_bytes_);
  backend->DownloadBytes(rows, hidden_.data(), hidden_.size());
  KeepBatch(batch);
}

void EagleFeatures::KeepBatch(const FlatBatch& batch) {
  input_ids_ = batch.input_ids;
  positions_ = batch.positions;
  query_start_ = batch.query_start;
  captured_ = true;
}

void EagleFeatures::Keep(const v1::StepPlan& verify) {
  if (!captured_) return;
  captured_ = false;
  ++steps_;
  // The captured batch is `verify` flattened: one batch sequence a plan row.
  if (static_cast<size_t>(verify.sequences_size()) + 1 != query_start_.size()) {
    rows_.clear();
    return;
  }
  for (int s = 0; s + 1 < static_cast<int>(query_start_.size()); ++s) {
    const int first = query_start_[s];
    const int kept = query_start_[s + 1] - first;
    EagleFeatureRows& rows = rows_[verify.sequences(s).seq_id()];
    rows.first_position = positions_[first];
    rows.next_tokens.assign(input_ids_.begin() + first + 1, input_ids_.begin() + first + kept);
    rows.hidden.resize(static_cast<size_t>(kept) * row_bytes_);
    std::memcpy(rows.hidden.data(), hidden_.data() + static_cast<size_t>(first) * row_bytes_,
                rows.hidden.size());
    rows.kept_at_step = steps_;
  }
  absl::erase_if(rows_, [this](const auto& entry) {
    return steps_ - entry.second.kept_at_step > kMaxIdleSteps;
  });
}

const EagleFeatureRows* EagleFeatures::Find(int64_t seq_id, int position) {
  auto it = rows_.find(seq_id);
  if (it == rows_.end()) return nullptr;
  EagleFeatureRows& rows = it->second;
  // The sequence continues after the input row and its accepted drafts,
  // which its rows hold at their positions; rows past them were rejected
  // drafts, whose tokens the sequence never took.
  const int verified = position - rows.first_position;
  if (verified < 1 || verified > rows.num_rows()) return nullptr;
  rows.next_tokens.resize(verified - 1);
  rows.hidden.resize(static_cast<size_t>(verified) * row_bytes_);
  return &rows;
}

void EagleFeatures::Forget() {
  captured_ = false;
  rows_.clear();
}

}  // namespace pagoda::worker
