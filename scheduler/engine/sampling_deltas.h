#ifndef PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_
#define PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_

// SamplingDeltas: the server's side of SequenceStep.sampling_unchanged and
// sampling_delta (docs/architecture.md "Block-table deltas"): the sampling
// options each row of the previous plan sent, so that a row whose options
// are identical leaves them out and the worker takes those it kept, and a
// penalty row whose options differ only in its counts and bans sends only
// those changes. Like BlockTableDeltas it compares what was sent, never why
// it might have changed, but for two parts of a penalty row that it does
// not build again: the prompt's distinct tokens (fixed when the request's
// group is made) and the counts of an output that only grows.

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
// The same but for banned_token_ids, which a SamplingDelta replaces.
bool SameSamplingOptionsBesidesBans(const pagoda::worker::v1::SamplingOptions& a,
                                    const pagoda::worker::v1::SamplingOptions& b);

// A penalty row's part that SamplingDeltas::GrowsPenaltyRow reads besides
// its options: where its counts and prompt tokens come from.
struct PenaltySource {
  // The prompt's distinct tokens the row sends (SequenceGroup::
  // distinct_prompt_tokens: made with the group, never changed, and a
  // seq_id belongs to one group), compared by address.
  const std::vector<int32_t>* prompt_tokens = nullptr;
  // How many output tokens the row's counts cover: the sequence's, less a
  // placeholder (the worker counts that one). A sequence's output is only
  // ever appended to (forks and beams get new seq_ids), so the tokens a
  // previous row counted are a prefix of these.
  int counted_outputs = 0;
};

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

  // For a sampling row with penalty counts: whether it may send a
  // SamplingDelta instead of its whole options. `light` are its options
  // without prompt_token_ids and the output counts (the row adds those when
  // this says no); true when the previous plan's row of seq_id sent the same
  // light ones but for the bans, with the same prompt tokens, and counted
  // at most kMaxAppendedOutputTokens fewer output tokens; `*counted_before`
  // is then how many (the row appends the output tokens from there on).
  // Records the row for the next plan either way.
  bool GrowsPenaltyRow(int64_t seq_id, const pagoda::worker::v1::SamplingOptions& light,
                       const PenaltySource& source, int* counted_before);

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
      // A penalty row (GrowsPenaltyRow): `options` are its light ones, and
      // its counts covered this many output tokens; -1 for other rows.
      int counted_outputs = -1;
      const std::vector<int32_t>* prompt_tokens = nullptr;
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
  // A copy of `options`, in a spare message when there is one.
  std::unique_ptr<Options> KeepCopy(const Options& options);

  PlanOptions previous_;
  PlanOptions current_;
  std::vector<std::unique_ptr<Options>> spare_;  // Reused for changed options.
  size_t next_previous_row_ = 0;  // Where the previous plan's next row likely is.
  std::optional<int64_t> current_step_;
  bool extends_previous_ = false;  // Whether current_'s plan may use previous_.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SAMPLING_DELTAS_H_
