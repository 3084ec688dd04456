#include "worker/block_table_cache.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"

namespace pagoda::worker {
namespace {

absl::Status TableDeltaError(const v1::SequenceStep& step, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("sequence ", step.seq_id(), ": block_table_start ",
                                                 step.block_table_start(), " ", problem));
}

absl::Status SamplingDeltaError(const v1::SequenceStep& step, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("sequence ", step.seq_id(), ": sampling_unchanged ", problem));
}

absl::Status SamplingDeltaError(const v1::SequenceStep& step, absl::string_view problem,
                                bool is_delta) {
  if (!is_delta) return SamplingDeltaError(step, problem);
  return absl::InvalidArgumentError(
      absl::StrCat("sequence ", step.seq_id(), ": sampling_delta ", problem));
}

// The kept options `options` made this step's (SequenceStep.sampling_delta):
// its bans replaced, its output counts grown by the appended tokens.
// Whether a row that takes its options from the previous step (`kept`,
// null when that step left none for it) may: anything the rule does not
// allow refuses the plan, naming the seq_id.
absl::Status CheckKeptSampling(const v1::SequenceStep& step, const v1::SamplingOptions* kept,
                               int64_t previous_step_id) {
  const bool sampling_delta = step.has_sampling_delta();
  if (step.has_sampling()) {
    return SamplingDeltaError(step, "with sampling options given", sampling_delta);
  }
  if (step.sampling_unchanged() && sampling_delta) {
    return SamplingDeltaError(step, "with sampling_unchanged given", true);
  }
  if (kept == nullptr) {
    return SamplingDeltaError(
        step, absl::StrCat("but step ", previous_step_id, " left no options for it"),
        sampling_delta);
  }
  if (step.sampling_delta().appended_output_token_ids_size() > kMaxAppendedOutputTokens) {
    return SamplingDeltaError(
        step,
        absl::StrCat("appends ", step.sampling_delta().appended_output_token_ids_size(),
                     " output tokens, more than ", kMaxAppendedOutputTokens),
        true);
  }
  if (kept->output_token_ids_size() != kept->output_token_counts_size()) {
    // A row that did not sample had its options kept unchecked.
    return SamplingDeltaError(step, "but the options kept have unpaired counts", true);
  }
  return absl::OkStatus();
}

void ApplySamplingDelta(const v1::SamplingDelta& delta, v1::SamplingOptions* options) {
  *options->mutable_banned_token_ids() = delta.banned_token_ids();
  auto* ids = options->mutable_output_token_ids();
  auto* counts = options->mutable_output_token_counts();
  for (int32_t token : delta.appended_output_token_ids()) {
    // A few tokens a step against at most max_tokens distinct ones.
    const auto found = std::find(ids->begin(), ids->end(), token);
    if (found == ids->end()) {
      ids->Add(token);
      counts->Add(1);
    } else {
      // The caller checked there are as many counts as ids; a count past
      // the request's max_tokens is refused when the plan is checked.
      const int at = static_cast<int>(found - ids->begin());
      const int32_t count = counts->Get(at);
      counts->Set(at, count < std::numeric_limits<int32_t>::max() ? count + 1 : count);
    }
  }
}

// Puts the first `start` entries of `kept` in front of the entries `step`
// sent, in place: its whole table. INVALID_ARGUMENT past `kept` or a table
// longer than `max_table_blocks`.
absl::Status ExtendSentTable(absl::Span<const int32_t> kept, int max_table_blocks,
                             v1::SequenceStep& step) {
  const int start = step.block_table_start();
  if (kept.size() < static_cast<size_t>(start)) {
    return TableDeltaError(
        step, absl::StrCat("is past the ", kept.size(), " entries the previous step left"));
  }
  const int64_t length = int64_t{start} + step.block_table_size();
  if (length > max_table_blocks) {
    return TableDeltaError(step, absl::StrCat("makes a table of ", length,
                                              " blocks, more than the cache's ", max_table_blocks));
  }
  auto* table = step.mutable_block_table();
  const int sent = table->size();
  table->Resize(static_cast<int>(length), 0);
  std::copy_backward(table->begin(), table->begin() + sent, table->end());
  std::copy_n(kept.begin(), start, table->begin());
  step.set_block_table_start(0);
  return absl::OkStatus();
}

}  // namespace

bool HasRowDeltas(const v1::StepPlan& plan) {
  return std::any_of(plan.sequences().begin(), plan.sequences().end(),
                     [](const v1::SequenceStep& step) {
                       return step.block_table_start() != 0 || step.sampling_unchanged() ||
                              step.has_sampling_delta();
                     });
}

void BlockTableCache::StepTables::Clear() {
  rows.clear();
  blocks.clear();
  index.clear();
  step_id.reset();
}

void BlockTableCache::StepTables::Retire(
    std::vector<std::unique_ptr<v1::SamplingOptions>>* retired) {
  for (Row& row : rows) {
    if (row.sampling != nullptr) retired->push_back(std::move(row.sampling));
  }
  Clear();
}

void BlockTableCache::StepTables::Add(int64_t seq_id, absl::Span<const int32_t> table,
                                      std::unique_ptr<v1::SamplingOptions> sampling) {
  rows.push_back(Row{seq_id, static_cast<int64_t>(blocks.size()),
                     static_cast<int32_t>(table.size()), std::move(sampling)});
  blocks.insert(blocks.end(), table.begin(), table.end());
}

BlockTableCache::StepTables::Row* BlockTableCache::StepTables::Find(int64_t seq_id,
                                                                    size_t* hint) {
  size_t row = *hint;
  if (row >= rows.size() || rows[row].seq_id != seq_id) {
    if (index.empty()) {
      index.reserve(rows.size());
      for (size_t i = 0; i < rows.size(); ++i) index[rows[i].seq_id] = static_cast<int>(i);
    }
    auto it = index.find(seq_id);
    if (it == index.end()) return nullptr;
    row = static_cast<size_t>(it->second);
  }
  *hint = row + 1;
  return &rows[row];
}

absl::Span<const int32_t> BlockTableCache::StepTables::TableOf(const Row* row) const {
  if (row == nullptr) return {};
  return absl::MakeConstSpan(blocks).subspan(row->offset, row->length);
}

void BlockTableCache::Clear() {
  // A plan on an arena may still point to these options; the next plan
  // frees them.
  committed_.Retire(&retired_);
  pending_.Retire(&retired_);
}

std::unique_ptr<v1::SamplingOptions> BlockTableCache::KeepCopy(
    const v1::SamplingOptions& options) {
  if (spare_.empty()) return std::make_unique<v1::SamplingOptions>(options);
  std::unique_ptr<v1::SamplingOptions> kept = std::move(spare_.back());
  spare_.pop_back();
  *kept = options;
  return kept;
}

absl::Status BlockTableCache::Resolve(v1::StepPlan* plan) {
  pending_.Retire(&spare_);
  // The plan the retired options belonged to is gone.
  for (auto& options : retired_) spare_.push_back(std::move(options));
  retired_.clear();
  pending_.step_id = plan->step_id();
  const bool chained = committed_.step_id.has_value() && *committed_.step_id == plan->step_id() - 1;
  const bool on_arena = plan->GetArena() != nullptr;
  size_t hint = 0;
  for (v1::SequenceStep& step : *plan->mutable_sequences()) {
    const int start = step.block_table_start();
    const bool sampling_unchanged = step.sampling_unchanged();
    const bool sampling_delta = step.has_sampling_delta();
    StepTables::Row* kept = nullptr;
    if (start < 0) return TableDeltaError(step, "is negative");
    if (start != 0 || sampling_unchanged || sampling_delta) {
      if (!chained) {
        const std::string problem = absl::StrCat(
            "refers to step ", plan->step_id() - 1, ", which is not this worker's last completed");
        return start != 0 ? TableDeltaError(step, problem)
                          : SamplingDeltaError(step, problem, sampling_delta);
      }
      kept = committed_.Find(step.seq_id(), &hint);
    }
    if (start != 0) {
      absl::Status extended = ExtendSentTable(committed_.TableOf(kept), max_table_blocks_, step);
      if (!extended.ok()) return extended;
    }
    std::unique_ptr<v1::SamplingOptions> options;
    if (sampling_unchanged || sampling_delta) {
      absl::Status usable = CheckKeptSampling(
          step, kept == nullptr ? nullptr : kept->sampling.get(), plan->step_id() - 1);
      if (!usable.ok()) return usable;
      options = std::move(kept->sampling);
      // The kept options are this row's alone from here on: grown in place.
      if (sampling_delta) ApplySamplingDelta(step.sampling_delta(), options.get());
      // An arena's plan points to the kept options, which outlive it; a
      // heap one would delete them, so it gets a copy.
      if (on_arena) {
        step.unsafe_arena_set_allocated_sampling(options.get());
      } else {
        *step.mutable_sampling() = *options;
      }
      step.set_sampling_unchanged(false);
      step.clear_sampling_delta();
    } else {
      options = KeepCopy(step.sampling());
    }
    pending_.Add(step.seq_id(), step.block_table(), std::move(options));
  }
  return absl::OkStatus();
}

void BlockTableCache::Record(const v1::StepPlan& plan) {
  pending_.Retire(&spare_);
  for (auto& options : retired_) spare_.push_back(std::move(options));
  retired_.clear();
  pending_.step_id = plan.step_id();
  for (const v1::SequenceStep& step : plan.sequences()) {
    pending_.Add(step.seq_id(), step.block_table(), KeepCopy(step.sampling()));
  }
}

void BlockTableCache::Commit() {
  // The rows the plan just run did not take hold no option it points to.
  std::swap(committed_, pending_);
  pending_.Retire(&spare_);
}

absl::Span<const int32_t> BlockTableCache::Find(int64_t seq_id) {
  size_t hint = 0;
  return committed_.TableOf(committed_.Find(seq_id, &hint));
}

const v1::SamplingOptions* BlockTableCache::FindSampling(int64_t seq_id) {
  size_t hint = 0;
  const StepTables::Row* row = committed_.Find(seq_id, &hint);
  return row == nullptr ? nullptr : row->sampling.get();
}

}  // namespace pagoda::worker
