#ifndef PAGODA_WORKER_LAST_SAMPLED_TOKENS_H_
#define PAGODA_WORKER_LAST_SAMPLED_TOKENS_H_

// What overlapped scheduling's placeholders (SequenceStep.
// input_from_last_sample) refer to: the tokens this worker sampled in its
// previous step, by seq_id. Rank 0 samples and knows the tokens; every other
// rank knows only which seq_ids were sampled (the same plan reached it) and
// receives the tokens from rank 0 at the step that uses them
// (ShareLastSampledTokens). The record lives in the runner's memory only: a
// restarted worker has none, so a plan that refers to it is refused and the
// server resends the real tokens.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/communicator.h"

namespace pagoda::worker {

class LastSampledTokens {
 public:
  // A token this rank has not seen (ranks other than 0 before sharing).
  static constexpr int32_t kUnknownToken = -1;

  // Forgets every token: a step that was refused or failed, or a new cache,
  // breaks the chain from one step to the next.
  void Clear() {
    tokens_.clear();
    step_id_.reset();
  }

  // Replaces the record with the rows `plan` sampled without drafts (a row
  // with drafts returns a run of tokens; placeholders never follow one in
  // this first version). Rank 0 passes its `result` (the tokens); the
  // other ranks pass null and record kUnknownToken.
  void Record(const v1::StepPlan& plan, const v1::StepResult* result);

  // The token sampled for `seq_id` in the previous step (kUnknownToken on a
  // rank that does not sample), or nullopt when the previous step did not
  // sample it.
  std::optional<int32_t> Find(int64_t seq_id) const;

  // The step_id of the recorded step, nullopt when none is recorded. A
  // placeholder of step S refers to step S - 1: a worker whose previous step
  // is another (plans run out of order) must refuse it, not substitute an
  // older token.
  std::optional<int64_t> step_id() const { return step_id_; }

  int size() const { return static_cast<int>(tokens_.size()); }

 private:
  absl::flat_hash_map<int64_t, int32_t> tokens_;
  std::optional<int64_t> step_id_;
};

// Tensor parallelism: gives every rank the placeholder tokens rank 0 wrote
// into `input_ids` at `rows`. One AllReduceSum of f32 (rank 0 contributes
// the tokens, the others zeros; ids below kMaxSamplingVocab < 2^24 are exact
// in f32) through `staging`, a backend buffer grown here when too small
// (so it allocates only at a new high). Nothing with one rank or no rows.
absl::Status ShareLastSampledTokens(const std::vector<int32_t>& rows, Communicator* communicator,
                                    Backend* backend, std::unique_ptr<Buffer>* staging,
                                    std::vector<int32_t>* input_ids);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LAST_SAMPLED_TOKENS_H_
