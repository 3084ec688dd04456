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
  current_step_ = step_id;
}

int BlockTableDeltas::StartFor(int64_t seq_id, absl::Span<const int> table) {
  int start = 0;
  if (extends_previous_) {
    auto it = previous_.index.find(seq_id);
    if (it != previous_.index.end()) {
      const int* kept = previous_.blocks.data() + it->second.offset;
      const int kept_length = std::min<int>(it->second.length, static_cast<int>(table.size()));
      start = static_cast<int>(std::mismatch(kept, kept + kept_length, table.begin()).first - kept);
    }
  }
  current_.index[seq_id] = PlanTables::Range{static_cast<int64_t>(current_.blocks.size()),
                                             static_cast<int32_t>(table.size())};
  current_.blocks.insert(current_.blocks.end(), table.begin(), table.end());
  return start;
}

void BlockTableDeltas::Reset() {
  previous_.Clear();
  current_.Clear();
  current_step_.reset();
  extends_previous_ = false;
}

}  // namespace pagoda::scheduler
