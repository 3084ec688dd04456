#ifndef PAGODA_WORKER_BLOCK_TABLE_CACHE_H_
#define PAGODA_WORKER_BLOCK_TABLE_CACHE_H_

// The worker's side of block-table deltas (SequenceStep.block_table_start,
// docs/architecture.md "Block-table deltas"): the whole block tables of the
// last step this worker completed, which a plan's rows extend, and the
// resolution of a plan's deltas into whole tables before anything else
// reads the plan. Every rank keeps its own (each receives the same plan).

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::worker {

// Whether any row of `plan` carries a delta (block_table_start != 0).
bool HasBlockTableDeltas(const v1::StepPlan& plan);

class BlockTableCache {
 public:
  // A resolved table longer than `max_table_blocks` (the cache's GPU
  // blocks) is refused, which bounds what deltas can grow.
  void Reset(int max_table_blocks) {
    max_table_blocks_ = max_table_blocks;
    Clear();
  }

  // Forgets every table: after a step that failed, was refused or was
  // cancelled (the server then sends whole tables).
  void Clear();

  // Rewrites every row of `plan` with a delta into its whole table
  // (block_table_start 0), and holds every row's whole table for Commit.
  // INVALID_ARGUMENT naming the seq_id for a negative start, or a positive
  // one when the last completed step is not plan.step_id - 1, lacks the
  // seq_id or has a table shorter than the start, or a table past
  // max_table_blocks; the plan, partly rewritten then, must not run.
  absl::Status Resolve(v1::StepPlan* plan);

  // Records the tables of `plan`, which has no deltas (HasBlockTableDeltas
  // is false), for Commit: Resolve's work for a plan it would not change.
  void Record(const v1::StepPlan& plan);

  // The step Resolve or Record saw completed: its tables become those the
  // next plan's deltas extend, and the older ones are dropped.
  void Commit();

  // The whole table `seq_id` had in the last committed step (empty when it
  // was not in it) and that step's id. For tests and checks.
  absl::Span<const int32_t> Find(int64_t seq_id);
  std::optional<int64_t> step_id() const { return committed_.step_id; }
  int num_sequences() const { return static_cast<int>(committed_.rows.size()); }

 private:
  // The whole tables of one step, in one buffer, row by row.
  struct StepTables {
    struct Row {
      int64_t seq_id = 0;
      int64_t offset = 0;
      int32_t length = 0;
    };
    std::vector<Row> rows;
    std::vector<int32_t> blocks;
    // Row by seq_id, built only when a row is not where the next plan's
    // order suggests (consecutive plans mostly list their rows alike).
    absl::flat_hash_map<int64_t, int> index;
    std::optional<int64_t> step_id;

    void Clear();
    void Add(int64_t seq_id, absl::Span<const int32_t> table);
    // The table of `seq_id`, looked for at row `*hint` first; `*hint` then
    // moves past the row found. Empty when the step did not have it.
    absl::Span<const int32_t> Find(int64_t seq_id, size_t* hint);
  };

  int max_table_blocks_ = 0;
  StepTables committed_;  // The last completed step's.
  StepTables pending_;    // The step being run.
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_BLOCK_TABLE_CACHE_H_
