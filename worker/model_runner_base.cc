#include "worker/model_runner_base.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/speculation_limits.h"
#include "glog/logging.h"
#include "worker/step_execution.h"

namespace pagoda::worker {

using v1::InitCacheRequest;
using v1::LoadModelRequest;
using v1::LoadModelResponse;
using v1::StepPlan;
using v1::StepResult;

absl::Status CheckWorkspaceLimits(const LoadModelRequest& request, int min_value) {
  if (request.max_num_batched_tokens() < min_value ||
      request.max_num_batched_tokens() > kMaxWorkspaceTokens ||
      request.max_num_seqs() < min_value || request.max_num_seqs() > kMaxWorkspaceTokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_batched_tokens and max_num_seqs must be in [", min_value, ", ",
                     kMaxWorkspaceTokens, "], got ", request.max_num_batched_tokens(), " and ",
                     request.max_num_seqs()));
  }
  if (request.num_speculative_tokens() < 0 ||
      request.num_speculative_tokens() > kMaxSpeculativeTokens) {
    return absl::InvalidArgumentError(absl::StrCat("num_speculative_tokens must be in [0, ",
                                                   kMaxSpeculativeTokens, "], got ",
                                                   request.num_speculative_tokens()));
  }
  return absl::OkStatus();
}

absl::Status ModelRunnerBase::InitCache(const InitCacheRequest& request) {
  if (model_ == nullptr) return absl::FailedPreconditionError("InitCache before LoadModel");
  if (request.num_gpu_blocks() <= 0 || request.num_cpu_blocks() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("InitCache needs num_gpu_blocks > 0 and num_cpu_blocks >= 0, got ",
                     request.num_gpu_blocks(), " and ", request.num_cpu_blocks()));
  }
  UseDevice();
  ReleaseCache();         // Free the old cache before allocating the new one.
  last_sampled_.Clear();  // Its tokens' KV is gone with the old cache.
  cache_ = std::make_unique<CacheEngine>(backend_.get(), CacheShape(), request.num_gpu_blocks(),
                                         request.num_cpu_blocks());
  if (draft_ != nullptr) {
    draft_->InitCache(block_size_, kv_cache_dtype_, request.num_gpu_blocks(),
                      request.num_cpu_blocks());
  }
  return OnCacheAllocated();
}

absl::StatusOr<StepResult> ModelRunnerBase::ExecuteStep(const StepPlan& plan,
                                                        const StepMaskWait& wait_for_masks) {
  if (cache_ == nullptr) return absl::FailedPreconditionError("ExecuteStep before InitCache");
  UseDevice();
  BatchLimits limits;  // What the draft model checks the plan against.
  if (serves_draft_) {
    limits = cache_->Limits(model_->config().vocab_size, model_->max_positions());
    limits.lora_slots = model_->PinLoraSlots();
  }
  v1::StepPlan proposed;  // Holds the plan with drafts, when the draft model proposes.
  absl::StatusOr<const StepPlan*> verify = PlanToVerify(DraftSource{.draft = draft_.get(),
                                                                    .served = serves_draft_,
                                                                    .communicator = timed_.get(),
                                                                    .backend = backend_.get(),
                                                                    .staging = &share_staging_},
                                                        plan, limits, &proposed);
  if (!verify.ok()) return verify.status();
  // An EAGLE head follows the target's hidden states (DraftModel::Follow*).
  const ForwardPass forward = [this](const FlatBatch& batch) {
    absl::StatusOr<ForwardOutput> output = RunForward(batch);
    if (output.ok() && draft_ != nullptr) draft_->FollowTargetForward(batch, *output);
    return output;
  };
  absl::StatusOr<StepResult> result =
      ExecuteStepPlan(**verify,
                      StepExecution{.cache = cache_.get(),
                                    .backend = backend_.get(),
                                    .timed = timed_.get(),
                                    .samples = &samples_,
                                    .model = model_.get(),
                                    .vocab_size = model_->config().vocab_size,
                                    .max_positions = model_->max_positions(),
                                    .wait_for_masks = &wait_for_masks,
                                    .last_sampled = &last_sampled_,
                                    .share_staging = &share_staging_},
                      forward);
  if (draft_ != nullptr) draft_->FollowStepResult(**verify, result);
  // Constrained rows' drafts for the next step, which the server checks
  // against their grammar before it sends them back (docs/speculative-decoding.md).
  if (result.ok() && draft_ != nullptr && HasNextDraftProposals(**verify)) {
    if (absl::Status ahead = draft_->ProposeAhead(**verify, &*result); !ahead.ok()) {
      return AsWorkerFault(ahead);
    }
  }
  return result;
}

void ModelRunnerBase::Abort() {
  absl::MutexLock lock(&abort_mutex_);
  if (communicator_ != nullptr) communicator_->Abort();
}

absl::Status ModelRunnerBase::CheckNotLoaded() const {
  if (model_ != nullptr) return absl::FailedPreconditionError("a model is already loaded");
  return absl::OkStatus();
}

void ModelRunnerBase::AdoptCommunicator(std::unique_ptr<Communicator> communicator) {
  absl::MutexLock lock(&abort_mutex_);
  communicator_ = std::move(communicator);
  timed_ = std::make_unique<TimedCommunicator>(communicator_.get());
}

void ModelRunnerBase::ReleaseCommunicator() {
  absl::MutexLock lock(&abort_mutex_);
  timed_.reset();
  communicator_.reset();
}

absl::Status ModelRunnerBase::LoadDraftModel(const LoadModelRequest& request,
                                             const LlamaLoadOptions& options) {
  if (request.draft_model_dir().empty()) return absl::OkStatus();
  const bool eagle3 = request.draft_is_eagle3_head();
  const bool eagle = request.draft_is_eagle_head() || eagle3;
  if (eagle && !request.draft_quantization().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("draft_quantization ",
                                                   request.draft_quantization(),
                                                   " is for a draft model, not an "
                                                   "EAGLE head"));
  }
  absl::StatusOr<bool> sharded = ShardsDraftModel(request);
  if (!sharded.ok()) return sharded.status();
  serves_draft_ = true;
  if (!*sharded && timed_->rank() != 0) return absl::OkStatus();
  Communicator* group = *sharded ? timed_.get() : nullptr;
  auto draft = eagle ? DraftModel::LoadEagle(request.draft_model_dir(), backend_.get(), options,
                                             model_.get(), eagle3, group)
                     : DraftModel::Load(request.draft_model_dir(), backend_.get(), options,
                                        model_->config(), group, request.draft_quantization());
  if (!draft.ok()) return draft.status();
  draft_ = *std::move(draft);
  LOG(INFO) << (eagle3               ? "EAGLE-3 head: "
                : draft_->is_eagle() ? "EAGLE head: "
                                     : "draft model: ")
            << draft_->weight_bytes() / (1 << 20) << " MiB, " << draft_->config().num_hidden_layers
            << " layers"
            << (*sharded ? absl::StrCat(", this rank's shard of ", request.world_size()) : "");
  return absl::OkStatus();
}

int64_t ModelRunnerBase::BytesPerBlock() const {
  const int64_t target = CacheShape().bytes_per_block();
  return draft_ == nullptr ? target
                           : target + draft_->bytes_per_block(block_size_, kv_cache_dtype_);
}

LoadModelResponse ModelRunnerBase::LoadedModelResponse(int32_t num_gpu_blocks) const {
  LoadModelResponse response;
  response.set_num_gpu_blocks(num_gpu_blocks);
  response.set_bytes_per_block(BytesPerBlock());
  response.set_vocab_size(model_->config().vocab_size);
  return response;
}

}  // namespace pagoda::worker
