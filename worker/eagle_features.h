#ifndef PAGODA_WORKER_EAGLE_FEATURES_H_
#define PAGODA_WORKER_EAGLE_FEATURES_H_

// EagleFeatures: what an EAGLE head (speculative decoding's eagle and eagle3
// methods) needs from its target between steps: per sequence, the target's
// final-normed hidden states (eagle; eagle3: its three aux layers' inputs,
// concatenated) of the positions the last step verified and
// the tokens that followed each. The head's row at position p reads
// (token p + 1, the target's hidden state at p), so it can run only once the
// token after p is known: at the start of the sequence's next step, whose
// first input token is the last one. docs/speculative-decoding.md.

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/flat_batch.h"

namespace pagoda::worker {

// One sequence's verified positions [first_position, first_position + n)
// that the head has not read yet.
struct EagleFeatureRows {
  int first_position = 0;
  // The tokens at positions first_position + 1 .. first_position + n - 1
  // (the token after the last one is the next step's first input).
  std::vector<int32_t> next_tokens;
  std::vector<char> hidden;  // n rows of the target's activations.
  int64_t kept_at_step = 0;  // The Keep call that stored them.
  int num_rows() const { return static_cast<int>(next_tokens.size()) + 1; }
};

// Thread safety: one caller at a time, as the runner that owns it.
class EagleFeatures {
 public:
  // `row_bytes`: one hidden state of the target's activations.
  explicit EagleFeatures(size_t row_bytes) : row_bytes_(row_bytes) {}

  size_t row_bytes() const { return row_bytes_; }

  // After the target's forward over `batch` (rank 0): copies every token
  // row's features (`rows`, backend memory: its final_hidden, or an EAGLE-3
  // target's aux_hidden) and the rows' tokens and positions to the host,
  // until Keep or Forget.
  void Capture(const FlatBatch& batch, const void* rows, Backend* backend);

  // After the step that verified `verify` succeeded: keeps, for each
  // sequence of the captured batch, its rows (prompt rows, the input row,
  // the drafts), in place of what it held before; then forgets sequences
  // not seen for kMaxIdleSteps Keep calls (a sequence swapped out longer
  // loses its rows: its drafts are then worse, never wrong). Which drafts
  // were accepted is left to Find: the sequence's next position says it,
  // on every rank (only rank 0's result holds the accepted tokens).
  void Keep(const v1::StepPlan& verify);

  // The rows of `seq_id` that end just before `position`, or null (none
  // kept, or kept for other positions: the sequence was recomputed). The
  // rows past `position` - 1 (rejected drafts) are dropped here.
  const EagleFeatureRows* Find(int64_t seq_id, int position);

  // Drops the capture and every kept row (a failed step).
  void Forget();

  static constexpr int64_t kMaxIdleSteps = 64;

 private:
  void KeepBatch(const FlatBatch& batch);  // The captured batch's tokens.

  size_t row_bytes_;
  // The captured batch.
  std::vector<char> hidden_;
  std::vector<int32_t> input_ids_, query_start_;
  std::vector<int32_t> positions_;
  bool captured_ = false;
  int64_t steps_ = 0;
  absl::flat_hash_map<int64_t, EagleFeatureRows> rows_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_EAGLE_FEATURES_H_
