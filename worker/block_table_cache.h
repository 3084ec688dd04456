#ifndef PAGODA_WORKER_BLOCK_TABLE_CACHE_H_
#define PAGODA_WORKER_BLOCK_TABLE_CACHE_H_

// The worker's side of block-table deltas (SequenceStep.block_table_start,
// sampling_unchanged and sampling_delta, docs/architecture.md "Block-table
// deltas"): per row of the last step this worker completed, its whole block
// table, which a plan's rows extend, and its sampling options, which a
// plan's rows may repeat or grow (penalty counts, bans); and the resolution of a plan's deltas into an old-style plan
// before anything else reads it. Every rank keeps its own (each receives the
// same plan).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::worker {

// Whether any row of `plan` carries a delta (block_table_start != 0,
// sampling_unchanged or a sampling_delta).
bool HasRowDeltas(const v1::StepPlan& plan);

class BlockTableCache {
 public:
  // A resolved table longer than `max_table_blocks` (the cache's GPU
  // blocks) is refused, which bounds what deltas can grow.
  void Reset(int max_table_blocks) {
    max_table_blocks_ = max_table_blocks;
    Clear();
  }

  // Forgets every row: after a step that failed, was refused or was
  // cancelled (the server then sends whole tables and every option).
  void Clear();

  // Rewrites every row of `plan` with a delta into its whole table
  // (block_table_start 0) and every row with sampling_unchanged or a
  // sampling_delta into one with the options kept (the delta applied to
  // them, in place: they are the row's alone), and holds every row's table
  // and options for Commit. INVALID_ARGUMENT naming the seq_id for a
  // negative start, or a positive one, a sampling_unchanged or a
  // sampling_delta when the last completed step is not plan.step_id - 1 or
  // lacks the seq_id, a start past the table kept, a table past
  // max_table_blocks, sampling_unchanged or sampling_delta with `sampling`
  // given, with each other or with no options kept, a delta appending more
  // than kMaxAppendedOutputTokens or growing kept counts that do not pair
  // with their ids; the plan, partly rewritten then, must not run. A plan on an arena gets the kept options by pointer
  // (they outlive it: Clear retires them until the next plan), else a copy.
  absl::Status Resolve(v1::StepPlan* plan);

  // Records the rows of `plan`, which has no deltas (HasRowDeltas is
  // false), for Commit: Resolve's work for a plan it would not change.
  void Record(const v1::StepPlan& plan);

  // The step Resolve or Record saw completed: its rows become those the
  // next plan's deltas extend, and the older ones are dropped.
  void Commit();

  // The whole table `seq_id` had in the last committed step (empty when it
  // was not in it) and that step's id. For tests and checks.
  absl::Span<const int32_t> Find(int64_t seq_id);
  // The sampling options `seq_id` had in the last committed step, or null
  // when it was not in it.
  const v1::SamplingOptions* FindSampling(int64_t seq_id);
  std::optional<int64_t> step_id() const { return committed_.step_id; }
  int num_sequences() const { return static_cast<int>(committed_.rows.size()); }

 private:
  // The whole tables of one step, in one buffer, row by row, and each
  // row's sampling options.
  struct StepTables {
    struct Row {
      int64_t seq_id = 0;
      int64_t offset = 0;
      int32_t length = 0;
      // Null when moved on to the next step's row.
      std::unique_ptr<v1::SamplingOptions> sampling;
    };
    std::vector<Row> rows;
    std::vector<int32_t> blocks;
    // Row by seq_id, built only when a row is not where the next plan's
    // order suggests (consecutive plans mostly list their rows alike).
    absl::flat_hash_map<int64_t, int> index;
    std::optional<int64_t> step_id;

    void Clear();
    // Moves every row's options into `retired` and clears.
    void Retire(std::vector<std::unique_ptr<v1::SamplingOptions>>* retired);
    void Add(int64_t seq_id, absl::Span<const int32_t> table,
             std::unique_ptr<v1::SamplingOptions> sampling);
    // The row of `seq_id`, looked for at row `*hint` first; `*hint` then
    // moves past the row found. Null when the step did not have it.
    Row* Find(int64_t seq_id, size_t* hint);
    absl::Span<const int32_t> TableOf(const Row* row) const;
  };

  int max_table_blocks_ = 0;
  StepTables committed_;  // The last completed step's.
  StepTables pending_;    // The step being run.
  // A copy of `options` to keep, in a spare message when there is one.
  std::unique_ptr<v1::SamplingOptions> KeepCopy(const v1::SamplingOptions& options);

  // Options a plan being run may still point to when Clear dropped their
  // rows (a refused or failed step): spare once the next plan comes.
  std::vector<std::unique_ptr<v1::SamplingOptions>> retired_;
  // Options no plan points to, reused by KeepCopy: a row whose options
  // changed costs a copy, not an allocation.
  std::vector<std::unique_ptr<v1::SamplingOptions>> spare_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_BLOCK_TABLE_CACHE_H_
