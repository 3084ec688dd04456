#ifndef PAGODA_WORKER_VOCAB_PARALLEL_HEAD_H_
#define PAGODA_WORKER_VOCAB_PARALLEL_HEAD_H_

// VocabParallelHead: an lm_head split over the vocabulary across a
// tensor-parallel group, as vLLM's ParallelLMHead (each rank holds its rows
// of the padded vocabulary, common/tensor_parallel_plan.h), whose logits are
// gathered to rank 0, the rank that samples. Whole (and no collective) in a
// group of one.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor_parallel_plan.h"
#include "worker/backend.h"
#include "worker/communicator.h"
#include "worker/linear.h"
#include "worker/weight_loader.h"

namespace pagoda::worker {

class VocabParallelHead {
 public:
  // Where the head's rows come from: tensor "<name>.weight" [vocab, hidden]
  // through `loader` (dense or quantized, as the checkpoint has it), or,
  // when `tied` is non-null, rows of that [vocab, hidden] table (the
  // embedding, held whole elsewhere; it must outlive the head).
  struct Source {
    WeightLoader* loader = nullptr;
    std::string name = "lm_head";
    const Buffer* tied = nullptr;
    // The layout before vocabulary-parallel heads, a benchmark's baseline
    // (LlamaLoadOptions::whole_lm_head_on_rank0): rank 0 holds every row and
    // computes the logits alone, the others hold none.
    bool whole_on_rank0 = false;
    // The config key giving the vocabulary, named by a refused split (an
    // EAGLE-3 head's lm_head spans its draft_vocab_size).
    std::string vocab_key = "vocab_size";
  };
  // This rank's rows of the head over `communicator`'s group (all of them in
  // a group of one); CheckVocabParallelSplit's error for a vocabulary the
  // group cannot split, the loader's errors naming the tensor otherwise.
  // backend and communicator must outlive the head.
  static absl::StatusOr<std::unique_ptr<VocabParallelHead>> Load(const Source& source,
                                                                 int64_t vocab, int64_t hidden,
                                                                 Backend* backend,
                                                                 Communicator* communicator);

  // True when the rows are spread over more than one rank: every rank must
  // then call Forward for the same rows, in the same order.
  bool split() const { return split_; }
  int64_t vocab() const { return vocab_; }
  IndexRange range() const { return range_; }
  size_t weight_bytes() const { return local_ ? local_->weight_bytes() : 0; }

  // logits[r, :] = head(hidden[r, :]) for `rows` rows, f32 [rows, vocab] in
  // backend memory on rank 0 (`logits` is ignored, and may be null, on the
  // others). Split: each rank computes its rows, the group all-gathers them,
  // and rank 0 lays them out; a failed collective's status is returned.
  absl::Status Forward(const void* hidden, int rows, float* logits);
  // Reserves the gather for `rows` rows now (at load), so a step of no more
  // rows allocates nothing; a bigger one grows it. Nothing when not split.
  void ReserveRows(int rows) {
    if (split_) ReserveGather(rows);
  }

 private:
  VocabParallelHead(Backend* backend, Communicator* communicator, int64_t vocab, bool split,
                    std::unique_ptr<Linear> local);
  // Makes gathered_ hold every rank's part for `rows` rows.
  void ReserveGather(int rows);

  Backend* backend_;
  Communicator* communicator_;
  int64_t vocab_;
  bool split_;
  int64_t rows_per_rank_;          // Padded: every rank's part of the gather.
  IndexRange range_;               // This rank's token ids.
  std::unique_ptr<Linear> local_;  // Null when range_ is empty.
  // [world, rows, rows_per_rank_] f32: rank r's [rows, its range] at r's part.
  std::unique_ptr<Buffer> gathered_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_VOCAB_PARALLEL_HEAD_H_
