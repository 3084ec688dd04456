#ifndef PAGODA_WORKER_DRAFT_MODEL_H_
#define PAGODA_WORKER_DRAFT_MODEL_H_

// DraftModel: speculative decoding's draft_model method on the worker. A
// second, smaller LlamaModel with its own KV cache over the target's block
// ids, which follows every row the target computes and proposes the drafts a
// plan asks for (SequenceStep.num_draft_proposals) by greedy single-token
// passes, before the target verifies them. docs/speculative-decoding.md.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {

// The draft model of one worker (rank 0 of its group: the draft runs at
// tensor-parallel size 1). Thread safety: one caller at a time, as the
// runner that owns it.
class DraftModel {
 public:
  // Loads `model_dir` on `backend` as one rank of its own. INVALID_ARGUMENT
  // when its vocabulary size is not `target`'s (naming both); the loader's
  // errors otherwise. `options.max_loras` is ignored: the draft serves no
  // adapters. backend must outlive the draft.
  static absl::StatusOr<std::unique_ptr<DraftModel>> Load(const std::string& model_dir,
                                                          Backend* backend,
                                                          const LlamaLoadOptions& options,
                                                          const ModelConfig& target);
  DraftModel(const DraftModel&) = delete;
  DraftModel& operator=(const DraftModel&) = delete;
  ~DraftModel();

  const ModelConfig& config() const { return model_->config(); }
  size_t weight_bytes() const { return model_->weight_bytes(); }
  // Bytes of one block of the draft's cache: the target's block ids span
  // both caches, so the runner divides its memory by the sum.
  int64_t bytes_per_block(int block_size, DType dtype) const {
    return model_->CacheShape(block_size, dtype).bytes_per_block();
  }

  // Frees the old cache, then allocates one of the target's block counts.
  void InitCache(int block_size, DType dtype, int num_gpu_blocks, int num_cpu_blocks);
  void ReleaseCache() { cache_.reset(); }

  // The plan the target is to verify: `plan` itself when it asks for no
  // proposals, else a copy in `storage` with each row's
  // num_draft_proposals turned into as many draft_token_ids, proposed here.
  // Validates first (FlattenStepPlan against `limits`, the proposals
  // counted as drafts): a refused plan is INVALID_ARGUMENT and touches
  // nothing. Then applies the plan's block moves to the draft's cache, runs
  // the draft over every row of the plan (writing its K/V where the target
  // writes its own), and for the proposing rows k greedy passes, the last
  // one only writing the last draft's K/V, so that the next step finds
  // every verified position in the draft's cache. Failures after
  // validation are worker faults (AsWorkerFault). REQUIRES: InitCache ran.
  absl::StatusOr<const v1::StepPlan*> Propose(const v1::StepPlan& plan, BatchLimits limits,
                                              v1::StepPlan* storage);

 private:
  DraftModel() = default;
  // The passes of Propose over `batch`, the verify plan flattened; fills
  // `verify`'s drafts (the proposals `plan` asks for).
  absl::Status RunPasses(const v1::StepPlan& plan, const FlatBatch& batch, v1::StepPlan* verify);
  // One forward of the draft over `batch`, and the greedy token of each of
  // its logits rows in samples_.
  absl::Status ForwardAndPick(const FlatBatch& batch);

  std::unique_ptr<Communicator> single_rank_;
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<CacheEngine> cache_;
  Backend* backend_ = nullptr;
  SampleResults samples_;
};

// Whether any row of `plan` asks for proposals.
bool HasDraftProposals(const v1::StepPlan& plan);

// What a runner verifies for `plan`: `draft`->Propose's plan, or without a
// draft model `plan` itself, refusing proposals (INVALID_ARGUMENT naming the
// seq_id: no draft model is loaded).
absl::StatusOr<const v1::StepPlan*> PlanToVerify(DraftModel* draft, const v1::StepPlan& plan,
                                                 const BatchLimits& limits, v1::StepPlan* storage);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_DRAFT_MODEL_H_
