#ifndef PAGODA_WORKER_MODEL_RUNNER_BASE_H_
#define PAGODA_WORKER_MODEL_RUNNER_BASE_H_

// What every device's ModelRunner does the same way: the request bounds of
// LoadModel, the response it builds, InitCache's checks and cache
// replacement, the step frame (ExecuteStepPlan) and Abort. A device runner
// (worker/cpu/, worker/cuda/) derives from ModelRunnerBase, implements
// LoadModel with the helpers below, and overrides the hooks where its device
// differs.

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "wire/limits.h"
#include "worker/backend.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/draft_model.h"
#include "worker/flat_batch.h"
#include "worker/last_sampled_tokens.h"
#include "worker/llama_model.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

using ::pagoda::wire::kMaxWorkspaceTokens;

// OK when `min_value` <= max_num_batched_tokens, max_num_seqs <=
// kMaxWorkspaceTokens, and num_speculative_tokens is in [0,
// kMaxSpeculativeTokens]; else INVALID_ARGUMENT naming the range. The CPU
// runner takes 0 (its defaults), the CUDA runner needs them set.
absl::Status CheckWorkspaceLimits(const v1::LoadModelRequest& request, int min_value);

class ModelRunnerBase : public ModelRunner {
 public:
  // Checks the counts, frees the old cache (ReleaseCache), allocates the new
  // one in CacheShape() on backend_ and calls OnCacheAllocated.
  absl::Status InitCache(const v1::InitCacheRequest& request) final;

  // ExecuteStepPlan over this runner's cache, backend and communicator, with
  // RunForward as the forward pass.
  absl::StatusOr<v1::StepResult> ExecuteStep(const v1::StepPlan& plan,
                                             const StepMaskWait& wait_for_masks) final;
  using ModelRunner::ExecuteStep;

  // Aborts the group's communicator, so a collective waiting on a dead rank
  // fails its step with ABORTED instead of waiting out the timeout.
  void Abort() final;

  std::shared_ptr<LoraAdapterLoader> lora_loader() final {
    return model_ != nullptr ? model_->lora_loader() : nullptr;
  }

 protected:
  ModelRunnerBase() = default;

  // Makes the calling thread use the backend's device before InitCache and
  // each step (CUDA binds a device per thread); nothing by default.
  virtual void UseDevice() {}
  // Frees the KV cache and whatever points into it, before a new one is
  // allocated.
  virtual void ReleaseCache() {
    cache_.reset();
    if (draft_ != nullptr) draft_->ReleaseCache();
  }
  // After InitCache allocated the cache (CUDA captures its graphs here).
  virtual absl::Status OnCacheAllocated() { return absl::OkStatus(); }
  // One forward pass over a flattened step: eager by default.
  virtual absl::StatusOr<ForwardOutput> RunForward(const FlatBatch& batch) {
    return model_->Forward(batch, cache_.get());
  }

  // FAILED_PRECONDITION when a model is already loaded: a runner loads once.
  absl::Status CheckNotLoaded() const;

  // Takes `communicator` as the group's, wrapped in timed_; Abort reaches it.
  void AdoptCommunicator(std::unique_ptr<Communicator> communicator);
  // Drops the group's communicator (and timed_), before the backend it may use.
  void ReleaseCommunicator();

  // Speculative decoding's draft model or EAGLE head, when the request
  // names one (draft_model_dir), its vocabulary the target's: loaded on
  // backend_ with `options` (the target's; DraftModel drops what a draft
  // does not serve), on rank 0 at tensor-parallel size 1 (the other ranks
  // receive its drafts), or sharded over the group as the target is
  // (ShardsDraftModel). Sets serves_draft_. REQUIRES: model_, timed_ set.
  absl::Status LoadDraftModel(const v1::LoadModelRequest& request, const LlamaLoadOptions& options);

  // The layout of one KV block of the loaded model.
  // REQUIRES: model_ is set.
  KvCacheShape CacheShape() const { return model_->CacheShape(block_size_, kv_cache_dtype_); }
  // Bytes one block id takes: the target's cache, and the draft model's
  // when one is loaded (both span the same block ids).
  int64_t BytesPerBlock() const;

  // LoadModel's answer: `num_gpu_blocks` blocks of BytesPerBlock() and the
  // model's vocabulary. REQUIRES: model_ is set.
  v1::LoadModelResponse LoadedModelResponse(int32_t num_gpu_blocks) const;

  // Declaration order is teardown order reversed: the cache goes before the
  // model, the model before the communicator, the communicator (which may
  // enqueue on the backend's stream) before the backend. A derived runner's
  // members go before all of these.
  std::unique_ptr<Backend> backend_;
  absl::Mutex abort_mutex_;  // Abort may come from any thread.
  std::unique_ptr<Communicator> communicator_ ABSL_GUARDED_BY(abort_mutex_);
  std::unique_ptr<TimedCommunicator> timed_;  // Wraps communicator_.
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<CacheEngine> cache_;
  // Speculative decoding's draft model (worker/draft_model.h), on rank 0
  // when LoadModelRequest.draft_model_dir is set; null otherwise (the other
  // ranks receive its drafts).
  std::unique_ptr<DraftModel> draft_;
  bool serves_draft_ = false;  // Every rank of a group with a draft model.
  SampleResults samples_;      // Reused: sampling allocates nothing once warm.
  // Overlap: the previous step's sampled tokens (placeholders refer to
  // them) and the staging buffer that shares them across ranks.
  LastSampledTokens last_sampled_;
  std::unique_ptr<Buffer> share_staging_;
  int block_size_ = 0;
  DType kv_cache_dtype_ = DType::kF32;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_MODEL_RUNNER_BASE_H_
