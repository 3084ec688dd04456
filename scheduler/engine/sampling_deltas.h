#ifndef PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_
#define PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_

// SamplingDeltas: the server's side of SequenceStep.sampling_unchanged
// (docs/architecture.md "Block-table deltas"): the sampling options each row
// of the previous plan sent, so that a row whose options are identical
// leaves them out and the worker takes those it kept. Like BlockTableDeltas
// it compares what was sent, never why it might have changed, so every
// per-step part of the options (bans, masks, counts) needs no case.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::scheduler {

class SamplingDeltas {
 public:
  // Begins the plan of step `step_id`. Its rows may leave their options out
  // only if that plan was step_id - 1 and nothing was reset since.
  void BeginPlan(int64_t step_id);

  // Whether `options`, built for `seq_id`'s row of the plan begun, are byte
  // for byte those the previous plan's row of seq_id sent, which the workers
  // keep: the row may then send sampling_unchanged instead. Records them for
  // the next plan, unless they carry output_token_ids (penalty counts,
  // which grow every step, so the workers keep no such options).
  bool Unchanged(int64_t seq_id, const pagoda::worker::v1::SamplingOptions& options);

  // Forgets every row's options: the next plan sends them all. When
  // BlockTableDeltas is reset, for the same reasons.
  void Reset();

 private:
  // The serialized options of one plan, in one buffer, row by row.
  struct PlanOptions {
    struct Row {
      int64_t seq_id = 0;
      int64_t offset = 0;
      int32_t length = -1;  // -1: not kept (penalty counts).
    };
    std::vector<Row> rows;
    std::string bytes;
    // Row by seq_id, built only when a row is not where the next plan's
    // order suggests (consecutive plans mostly list their rows alike).
    absl::flat_hash_map<int64_t, int> index;
    void Clear() {
      rows.clear();
      bytes.clear();
      index.clear();
    }
  };

  // The previous plan's row of `seq_id`, or null.
  const PlanOptions::Row* PreviousRow(int64_t seq_id);

  PlanOptions previous_;
  PlanOptions current_;
  size_t next_previous_row_ = 0;  // Where the previous plan's next row likely is.
  std::optional<int64_t> current_step_;
  bool extends_previous_ = false;  // Whether current_'s plan may use previous_.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_
