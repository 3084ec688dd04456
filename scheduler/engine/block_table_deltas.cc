#include "scheduler/engine/block_table_deltas.h"

#include <algorithm>
#include <utility>

namespace pagoda::scheduler {

void BlockTableDeltas::BeginPlan(int64_t step_id) {
  // The plan begun before this one is what the workers will hold.
  extends_previous_ = current_step_.has_value() && *current_step_ == step_id - 1;
  std::swap(previous_, current_);
  current_.Clear();
  if (!extends_previous_) previous_.Clear();
  next_previous_row_ = 0;
  current_step_ = step_id;
}

const BlockTableDeltas::PlanTables::Row* BlockTableDeltas::PreviousRow(int64_t seq_id) {
  const std::vector<PlanTables::Row>& rows = previous_.rows;
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

int BlockTableDeltas::StartFor(int64_t seq_id, absl::Span<const int> table) {
  int start = 0;
  if (extends_previous_) {
    if (const PlanTables::Row* row = PreviousRow(seq_id); row != nullptr) {
      const int* kept = previous_.blocks.data() + row->offset;
      const int kept_length = std::min<int>(row->length, static_cast<int>(table.size()));
      start = static_cast<int>(std::mismatch(kept, kept + kept_length, table.begin()).first - kept);
    }
  }
  current_.rows.push_back(PlanTables::Row{seq_id, static_cast<int64_t>(current_.blocks.size()),
                                          static_cast<int32_t>(table.size())});
  current_.blocks.insert(current_.blocks.end(), table.begin(), table.end());
  return start;
}

void BlockTableDeltas::Reset() {
  previous_.Clear();
  current_.Clear();
  next_previous_row_ = 0;
  current_step_.reset();
  extends_previous_ = false;
}

}  // namespace pagoda::scheduler
