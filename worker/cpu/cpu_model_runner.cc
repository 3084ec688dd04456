// The CPU ModelRunner: LlamaModel over the CPU backend, one CacheEngine,
// plans validated and flattened by FlattenStepPlan, tokens picked by the
// backend's Sample.

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "worker/batch.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/llama_model.h"
#include "worker/step_execution.h"
#include "worker/tensor_parallel_group.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::InitCacheRequest;
using pagoda::worker::v1::LoadModelRequest;
using pagoda::worker::v1::LoadModelResponse;
using pagoda::worker::v1::StepPlan;
using pagoda::worker::v1::StepResult;

// Far above any CPU this runs on; bounds a hostile request.
constexpr int kMaxCpuThreads = 1024;
// The workspace is reserved from these at load; bounds a hostile request.
constexpr int kMaxWorkspaceTokens = 1 << 20;

class CpuModelRunner final : public ModelRunner {
 public:
  explicit CpuModelRunner(const CpuModelRunnerOptions& options) : options_(options) {}

  absl::StatusOr<LoadModelResponse> LoadModel(const LoadModelRequest& request) override {
    if (model_ != nullptr) return absl::FailedPreconditionError("a model is already loaded");
    if (!request.device().empty() && request.device() != "cpu") {
      return absl::InvalidArgumentError(
          absl::StrCat("the CPU model runner cannot run on device '", request.device(), "'"));
    }
    if (request.block_size() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("block_size must be positive, got ", request.block_size()));
    }
    if (request.kv_cache_memory_bytes() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_memory_bytes must be positive, got ",
                                                     request.kv_cache_memory_bytes()));
    }
    auto membership = ParseGroupMembership(request);
    if (!membership.ok()) return membership.status();
    if (request.cpu_threads() < 0 || request.cpu_threads() > kMaxCpuThreads) {
      return absl::InvalidArgumentError(absl::StrCat("cpu_threads must be in [0, ", kMaxCpuThreads,
                                                     "], got ", request.cpu_threads()));
    }
    if (request.max_num_batched_tokens() < 0 ||
        request.max_num_batched_tokens() > kMaxWorkspaceTokens || request.max_num_seqs() < 0 ||
        request.max_num_seqs() > kMaxWorkspaceTokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_num_batched_tokens and max_num_seqs must be in [0, ", kMaxWorkspaceTokens, "], got ",
          request.max_num_batched_tokens(), " and ", request.max_num_seqs()));
    }
    auto weight_dtype = ParseDTypeFlag(request.dtype());
    if (!weight_dtype.ok()) return weight_dtype.status();
    auto kv_cache_dtype = ParseKvCacheDTypeFlag(request.kv_cache_dtype());
    if (!kv_cache_dtype.ok()) return kv_cache_dtype.status();
    if (absl::Status joined = JoinGroup(request.model_dir(), *membership); !joined.ok()) {
      return joined;
    }
    // The backend (and its thread pool) is made here, where the thread count
    // is known; the model and cache keep pointers into it.
    backend_ = CreateCpuBackend(request.cpu_threads());
    const LlamaLoadOptions options{
        .weight_dtype = *weight_dtype,
        .max_num_batched_tokens = request.max_num_batched_tokens() > 0
                                      ? request.max_num_batched_tokens()
                                      : LlamaLoadOptions().max_num_batched_tokens,
        .max_num_seqs =
            request.max_num_seqs() > 0 ? request.max_num_seqs() : LlamaLoadOptions().max_num_seqs,
        .block_size = request.block_size()};
    auto model = LlamaModel::Load(request.model_dir(), backend_.get(), timed_.get(), options);
    if (!model.ok()) return model.status();
    model_ = *std::move(model);
    block_size_ = request.block_size();
    kv_cache_dtype_ = kv_cache_dtype->value_or(backend_->default_kv_cache_dtype());

    const int64_t bytes_per_block = CacheShape().bytes_per_block();
    const int64_t blocks = request.kv_cache_memory_bytes() / bytes_per_block;
    LoadModelResponse response;
    response.set_num_gpu_blocks(
        static_cast<int32_t>(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max())));
    response.set_bytes_per_block(bytes_per_block);
    response.set_vocab_size(model_->config().vocab_size);
    return response;
  }

  absl::Status InitCache(const InitCacheRequest& request) override {
    if (model_ == nullptr) return absl::FailedPreconditionError("InitCache before LoadModel");
    if (request.num_gpu_blocks() <= 0 || request.num_cpu_blocks() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("InitCache needs num_gpu_blocks > 0 and num_cpu_blocks >= 0, got ",
                       request.num_gpu_blocks(), " and ", request.num_cpu_blocks()));
    }
    cache_.reset();  // Free the old cache before allocating the new one.
    cache_ = std::make_unique<CacheEngine>(backend_.get(), CacheShape(), request.num_gpu_blocks(),
                                           request.num_cpu_blocks());
    return absl::OkStatus();
  }

  absl::StatusOr<StepResult> ExecuteStep(const StepPlan& plan) override {
    if (cache_ == nullptr) return absl::FailedPreconditionError("ExecuteStep before InitCache");
    return ExecuteStepPlan(
        plan,
        StepExecution{.cache = cache_.get(),
                      .backend = backend_.get(),
                      .timed = timed_.get(),
                      .samples = &samples_,
                      .vocab_size = model_->config().vocab_size},
        [this](const FlatBatch& batch) { return model_->Forward(batch, cache_.get()); });
  }

  void Abort() override {
    absl::MutexLock lock(&abort_mutex_);
    if (communicator_ != nullptr) communicator_->Abort();
  }

 private:
  absl::Status JoinGroup(const std::string& model_dir, const GroupMembership& membership) {
    auto communicator =
        ::pagoda::worker::JoinGroup(membership, model_dir, GlooTransport(options_.collective_host));
    if (!communicator.ok()) return communicator.status();
    absl::MutexLock lock(&abort_mutex_);
    communicator_ = *std::move(communicator);
    timed_ = std::make_unique<TimedCommunicator>(communicator_.get());
    return absl::OkStatus();
  }

  const CpuModelRunnerOptions options_;

  KvCacheShape CacheShape() const { return model_->CacheShape(block_size_, kv_cache_dtype_); }

  // Row `row` of samples_ as the token of `step`, with the top logprobs it
  // asked for (samples_ holds the most any row of the step asked for).

  std::unique_ptr<Backend> backend_;
  absl::Mutex abort_mutex_;  // Abort may come from any thread.
  std::unique_ptr<Communicator> communicator_ ABSL_GUARDED_BY(abort_mutex_);
  std::unique_ptr<TimedCommunicator> timed_;  // Wraps communicator_.
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<CacheEngine> cache_;
  int block_size_ = 0;
  DType kv_cache_dtype_ = DType::kF32;
  SampleResults samples_;  // Reused: sampling allocates nothing once warm.
};

}  // namespace

std::unique_ptr<ModelRunner> CreateCpuModelRunner(const CpuModelRunnerOptions& options) {
  return std::make_unique<CpuModelRunner>(options);
}

}  // namespace pagoda::worker
