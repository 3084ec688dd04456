#include "scheduler/engine/sampling_deltas.h"

#include <utility>

namespace pagoda::scheduler {

void SamplingDeltas::BeginPlan(int64_t step_id) {
  // The plan begun before this one is what the workers will hold.
  extends_previous_ = current_step_.has_value() && *current_step_ == step_id - 1;
  std::swap(previous_, current_);
  current_.Clear();
  if (!extends_previous_) previous_.Clear();
  next_previous_row_ = 0;
  current_step_ = step_id;
}

const SamplingDeltas::PlanOptions::Row* SamplingDeltas::PreviousRow(int64_t seq_id) {
  const std::vector<PlanOptions::Row>& rows = previous_.rows;
  size_t row = next_previous_row_;
  if (row >= rows.size() || rows[row].seq_id != seq_id) {
    if (previous_.index.empty()) {
      previous_.index.reserve(rows.size());
      for (size_t i = 0; i < rows.size(); ++i)
        previous_.index[rows[i].seq_id] = static_cast<int>(i);
    }
    auto it = previous_.index.find(seq_id);
    if (it == previous_.index.end()) return nullptr;
    row = static_cast<size_t>(it->second);
  }
  next_previous_row_ = row + 1;
  return &rows[row];
}

bool SamplingDeltas::Unchanged(int64_t seq_id,
                               const pagoda::worker::v1::SamplingOptions& options) {
  PlanOptions::Row& recorded = current_.rows.emplace_back();
  recorded.seq_id = seq_id;
  recorded.offset = static_cast<int64_t>(current_.bytes.size());
  if (options.output_token_ids_size() > 0) return false;  // Never kept.
  // Proto3 without maps serializes equal messages to equal bytes, and
  // unequal ones (even -0 against 0) to unequal bytes: byte equality never
  // omits options that differ.
  const size_t size = options.ByteSizeLong();
  current_.bytes.resize(current_.bytes.size() + size);
  options.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(current_.bytes.data() + recorded.offset));
  recorded.length = static_cast<int32_t>(size);
  if (!extends_previous_) return false;
  const PlanOptions::Row* previous = PreviousRow(seq_id);
  if (previous == nullptr || previous->length != recorded.length) return false;
  return current_.bytes.compare(recorded.offset, size, previous_.bytes, previous->offset, size) ==
         0;
}

void SamplingDeltas::Reset() {
  previous_.Clear();
  current_.Clear();
  next_previous_row_ = 0;
  current_step_.reset();
  extends_previous_ = false;
}

}  // namespace pagoda::scheduler
