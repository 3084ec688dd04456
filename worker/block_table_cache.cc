#include "worker/block_table_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace pagoda::worker {
namespace {

absl::Status TableDeltaError(const v1::SequenceStep& step, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("sequence ", step.seq_id(), ": block_table_start ",
                                                 step.block_table_start(), " ", problem));
}

}  // namespace

bool HasBlockTableDeltas(const v1::StepPlan& plan) {
  return std::any_of(plan.sequences().begin(), plan.sequences().end(),
                     [](const v1::SequenceStep& step) { return step.block_table_start() != 0; });
}

void BlockTableCache::StepTables::Clear() {
  rows.clear();
  blocks.clear();
  index.clear();
  step_id.reset();
}

void BlockTableCache::StepTables::Add(int64_t seq_id, absl::Span<const int32_t> table) {
  rows.push_back(
      Row{seq_id, static_cast<int64_t>(blocks.size()), static_cast<int32_t>(table.size())});
  blocks.insert(blocks.end(), table.begin(), table.end());
}

absl::Span<const int32_t> BlockTableCache::StepTables::Find(int64_t seq_id, size_t* hint) {
  size_t row = *hint;
  if (row >= rows.size() || rows[row].seq_id != seq_id) {
    if (index.empty()) {
      index.reserve(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) index[rows[i].seq_id] = static_cast<int>(i);
    }
    auto it = index.find(seq_id);
    if (it == index.end()) return {};
    row = static_cast<size_t>(it->second);
  }
  *hint = row + 1;
  return absl::MakeConstSpan(blocks).subspan(rows[row].offset, rows[row].length);
}

void BlockTableCache::Clear() {
  committed_.Clear();
  pending_.Clear();
}

absl::Status BlockTableCache::Resolve(v1::StepPlan* plan) {
  pending_.Clear();
  pending_.step_id = plan->step_id();
  const bool chained = committed_.step_id.has_value() && *committed_.step_id == plan->step_id() - 1;
  size_t hint = 0;
  for (v1::SequenceStep& step : *plan->mutable_sequences()) {
    const int start = step.block_table_start();
    if (start != 0) {
      if (start < 0) return TableDeltaError(step, "is negative");
      if (!chained) {
        return TableDeltaError(step, absl::StrCat("refers to step ", plan->step_id() - 1,
                                                  ", which is not this worker's last completed"));
      }
      const absl::Span<const int32_t> kept = committed_.Find(step.seq_id(), &hint);
      if (kept.size() < static_cast<size_t>(start)) {
        return TableDeltaError(
            step, absl::StrCat("is past the ", kept.size(), " entries the previous step left"));
      }
      const int64_t length = int64_t{start} + step.block_table_size();
      if (length > max_table_blocks_) {
        return TableDeltaError(
            step, absl::StrCat("makes a table of ", length, " blocks, more than the cache's ",
                               max_table_blocks_));
      }
      // The kept prefix goes in front of the entries sent, in place.
      auto* table = step.mutable_block_table();
      const int sent = table->size();
      table->Resize(static_cast<int>(length), 0);
      std::copy_backward(table->begin(), table->begin() + sent, table->end());
      std::copy_n(kept.begin(), start, table->begin());
      step.set_block_table_start(0);
    }
    pending_.Add(step.seq_id(), step.block_table());
  }
  return absl::OkStatus();
}

void BlockTableCache::Record(const v1::StepPlan& plan) {
  pending_.Clear();
  pending_.step_id = plan.step_id();
  for (const v1::SequenceStep& step : plan.sequences()) {
    pending_.Add(step.seq_id(), step.block_table());
  }
}

void BlockTableCache::Commit() {
  std::swap(committed_, pending_);
  pending_.Clear();
}

absl::Span<const int32_t> BlockTableCache::Find(int64_t seq_id) {
  size_t hint = 0;
  return committed_.Find(seq_id, &hint);
}

}  // namespace pagoda::worker
