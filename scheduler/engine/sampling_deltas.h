#ifndef PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_
#define PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_

// SamplingDeltas: the server's side of SequenceStep.sampling_unchanged
// (docs/architecture.md "Block-table deltas"): the sampling options each row
// of the previous plan sent, so that a row whose options are identical
// leaves them out and the worker takes those it kept. Like BlockTableDeltas
// it compares what was sent, never why it might have changed, so every
// per-step part of the options (bans, masks, counts) needs no case.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::scheduler {

// Whether `a` and `b` are the same options field for field, floats bit for
// bit (so -0 is not 0: such options are only sent again). Compares every
// field SamplingOptions has; SamplingDeltas refuses to exist when the
// message gains one this does not know.
bool SameSamplingOptions(const pagoda::worker::v1::SamplingOptions& a,
                         const pagoda::worker::v1::SamplingOptions& b);

class SamplingDeltas {
 public:
  SamplingDeltas();

  // Begins the plan of step `step_id`. Its rows may leave their options out
  // only if that plan was step_id - 1 and nothing was reset since.
  void BeginPlan(int64_t step_id);

  // Whether `options`, built for `seq_id`'s row of the plan begun, are those
  // the previous plan's row of seq_id sent, which the workers keep: the row
  // may then send sampling_unchanged instead. Records them for the next
  // plan (a copy only when they changed), unless they carry
  // output_token_ids (penalty counts, which grow every step: the workers
  // keep no such options).
  bool Unchanged(int64_t seq_id, const pagoda::worker::v1::SamplingOptions& options);

  // Forgets every row's options: the next plan sends them all. When
  // BlockTableDeltas is reset, for the same reasons.
  void Reset();

 private:
  using Options = pagoda::worker::v1::SamplingOptions;
  // The options one plan sent, row by row.
  struct PlanOptions {
    struct Row {
      int64_t seq_id = 0;
      std::unique_ptr<Options> options;  // Null: not kept, or moved on.
    };
    std::vector<Row> rows;
    // Row by seq_id, built only when a row is not where the next plan's
    // order suggests (consecutive plans mostly list their rows alike).
    absl::flat_hash_map<int64_t, int> index;
  };

  // The previous plan's row of `seq_id`, or null.
  PlanOptions::Row* PreviousRow(int64_t seq_id);
  // Moves every row's options of `plan` to spare_ and clears it.
  void Recycle(PlanOptions* plan);

  PlanOptions previous_;
  PlanOptions current_;
  std::vector<std::unique_ptr<Options>> spare_;  // Reused for changed options.
  size_t next_previous_row_ = 0;  // Where the previous plan's next row likely is.
  std::optional<int64_t> current_step_;
  bool extends_previous_ = false;  // Whether current_'s plan may use previous_.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_
