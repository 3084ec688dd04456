#ifndef PAGODA_SCHEDULER_ENGINE_BLOCK_TABLE_DELTAS_H_
#define PAGODA_SCHEDULER_ENGINE_BLOCK_TABLE_DELTAS_H_

// BlockTableDeltas: the server's side of block-table deltas
// (SequenceStep.block_table_start, docs/architecture.md "Block-table
// deltas"): the whole tables the previous plan sent, so that each row of the
// next plan carries only the entries after the prefix its table shares with
// the one the worker kept. The rule reads the tables themselves, never why
// they changed, so preemption, swap-in remapping, copy-on-write, prefix-cache
// hits, forks and rollback need no case of their own.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace pagoda::scheduler {

class BlockTableDeltas {
 public:
  // Begins the plan of step `step_id`. Its rows extend the previous plan's
  // tables only if that plan was step_id - 1 and nothing was reset since.
  void BeginPlan(int64_t step_id);

  // The block_table_start of `seq_id`'s row in the plan begun, whose whole
  // table is `table`: the length of the prefix it shares with the table the
  // previous plan sent for seq_id (0 when there is none to extend), which
  // the row then leaves out. Records `table` for the next plan.
  int StartFor(int64_t seq_id, absl::Span<const int> table);

  // Forgets every table: the next plan sends them whole. After a step that
  // failed, was refused or abandoned, and after the workers restarted (a
  // new worker knows no step).
  void Reset();

 private:
  // The whole tables of one plan, in one buffer, row by row.
  struct PlanTables {
    struct Row {
      int64_t seq_id = 0;
      int64_t offset = 0;
      int32_t length = 0;
    };
    std::vector<Row> rows;
    std::vector<int> blocks;
    // Row by seq_id, built only when a row is not where the next plan's
    // order suggests (consecutive plans mostly list their rows alike).
    absl::flat_hash_map<int64_t, int> index;
    void Clear() {
      rows.clear();
      blocks.clear();
      index.clear();
    }
  };

  // The previous plan's row of `seq_id`, or null.
  const PlanTables::Row* PreviousRow(int64_t seq_id);

  PlanTables previous_;
  PlanTables current_;
  size_t next_previous_row_ = 0;  // Where the previous plan's next row likely is.
  std::optional<int64_t> current_step_;
  bool extends_previous_ = false;  // Whether current_'s plan may use previous_.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_BLOCK_TABLE_DELTAS_H_
