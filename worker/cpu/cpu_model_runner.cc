// The CPU ModelRunner: LlamaModel over the CPU backend, one CacheEngine,
// plans validated and flattened by FlattenStepPlan, tokens picked by the
// backend's Sample. What it shares with the CUDA runner is in
// worker/model_runner_base.h.

#include "worker/cpu/cpu_model_runner.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/quantization_methods.h"
#include "glog/logging.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/quant_tile_kernels.h"
#include "worker/cpu/simd.h"
#include "worker/draft_model.h"
#include "worker/llama_model.h"
#include "worker/model_runner_base.h"
#include "worker/tensor_parallel_group.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::LoadModelRequest;
using pagoda::worker::v1::LoadModelResponse;

// Far above any CPU this runs on; bounds a hostile request.
constexpr int kMaxCpuThreads = 1024;

// What only the CPU runner asks of a LoadModel request.
absl::Status ValidateCpuRequest(const LoadModelRequest& request) {
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
  return absl::OkStatus();
}

// The request's step sizes, where set (0 keeps LlamaLoadOptions' defaults).
LlamaLoadOptions CpuLoadOptions(const LoadModelRequest& request, std::optional<DType> weights) {
  const LlamaLoadOptions defaults;
  return LlamaLoadOptions{
      .weight_dtype = weights,
      .max_num_batched_tokens = request.max_num_batched_tokens() > 0
                                    ? request.max_num_batched_tokens()
                                    : defaults.max_num_batched_tokens,
      .max_num_seqs = request.max_num_seqs() > 0 ? request.max_num_seqs() : defaults.max_num_seqs,
      .num_speculative_tokens = request.num_speculative_tokens(),
      .block_size = request.block_size(),
      .quantization = request.quantization(),
      .max_loras = request.max_loras(),
      .max_lora_rank = request.max_lora_rank(),
      .max_cpu_loras = request.max_cpu_loras(),
      .max_lora_trainable_tokens = request.max_lora_trainable_tokens()};
}

class CpuModelRunner final : public ModelRunnerBase {
 public:
  explicit CpuModelRunner(const CpuModelRunnerOptions& options) : options_(options) {}

  absl::StatusOr<LoadModelResponse> LoadModel(const LoadModelRequest& request) override {
    if (absl::Status status = CheckNotLoaded(); !status.ok()) return status;
    if (absl::Status status = ValidateCpuRequest(request); !status.ok()) return status;
    if (absl::Status status = ShardsDraftModel(request).status(); !status.ok()) return status;
    auto membership = ParseGroupMembership(request);
    if (!membership.ok()) return membership.status();
    if (request.cpu_threads() < 0 || request.cpu_threads() > kMaxCpuThreads) {
      return absl::InvalidArgumentError(absl::StrCat("cpu_threads must be in [0, ", kMaxCpuThreads,
                                                     "], got ", request.cpu_threads()));
    }
    if (absl::Status status = CheckWorkspaceLimits(request, 0); !status.ok()) return status;
    auto weight_dtype = ParseDTypeFlag(request.dtype());
    if (!weight_dtype.ok()) return weight_dtype.status();
    auto kv_cache_dtype = ParseKvCacheDTypeFlag(request.kv_cache_dtype());
    if (!kv_cache_dtype.ok()) return kv_cache_dtype.status();
    if (!IsCpuWeightOnlyActivations(request.cpu_weight_only_activations())) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu_weight_only_activations must be int8 or float32, got ",
                       request.cpu_weight_only_activations()));
    }
    auto communicator =
        JoinGroup(*membership, request.model_dir(), TcpTransport(options_.collective_host));
    if (!communicator.ok()) return communicator.status();
    AdoptCommunicator(*std::move(communicator));
    // The backend (and its thread pool) is made here, where the thread count
    // is known; the model and cache keep pointers into it.
    backend_ =
        CreateCpuBackend(request.cpu_threads(), request.cpu_weight_only_activations() == "float32"
                                                    ? WeightOnlyActivations::kFloat32
                                                    : WeightOnlyActivations::kInt8);
    if (options_.wrap_backend) backend_ = options_.wrap_backend(std::move(backend_));
    // Picked from CPUID at run time (docs/quantization.md, "CPUs without AVX-512").
    LOG(INFO) << "CPU kernels: " << SimdLevelName(BestSimdLevel()) << " (int8 Linears: "
              << Int8KernelsName(BestSimdLevel()) << ")";
    auto model = LlamaModel::Load(request.model_dir(), backend_.get(), timed_.get(),
                                  CpuLoadOptions(request, *weight_dtype));
    if (!model.ok()) return model.status();
    model_ = *std::move(model);
    const QuantConfig& quant = model_->quant_config();
    LOG(INFO) << "weights " << model_->weight_bytes() << " bytes, "
              << model_->weight_bytes() / (1 << 20) << " MiB (" << quant.Describe() << ")";
    if (request.max_loras() > 0) {
      const LoraAdapterLoader& lora = *model_->lora_loader();
      LOG(INFO) << "LoRA: " << request.max_loras() << " adapter slots of rank up to "
                << request.max_lora_rank() << "; up to " << lora.cache_capacity()
                << " adapters cached on the host, at most "
                << lora.cache_capacity() * lora.slots()->MaxAdapterBytes() / (1 << 20) << " MiB";
    }
    if (absl::Status status = LoadDraftModel(request, CpuLoadOptions(request, *weight_dtype));
        !status.ok()) {
      return status;
    }
    block_size_ = request.block_size();
    kv_cache_dtype_ = kv_cache_dtype->value_or(backend_->default_kv_cache_dtype());
    // As many blocks as the memory the server gave this worker holds (the
    // draft model's cache takes its share of every block id).
    const int64_t blocks = request.kv_cache_memory_bytes() / BytesPerBlock();
    return LoadedModelResponse(
        static_cast<int32_t>(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max())));
  }

 private:
  const CpuModelRunnerOptions options_;
};

}  // namespace

std::unique_ptr<ModelRunner> CreateCpuModelRunner(const CpuModelRunnerOptions& options) {
  return std::make_unique<CpuModelRunner>(options);
}

}  // namespace pagoda::worker
