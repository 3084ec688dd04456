// The CUDA ModelRunner (see cuda_model_runner.h).

#include "worker/cuda/cuda_model_runner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/model_config.h"
#include "glog/logging.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_graph_runner.h"
#include "worker/cuda/cuda_lora_slots.h"
#include "worker/cuda/cuda_support.h"
#include "worker/cuda/graph_batch.h"
#include "worker/draft_model.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"
#include "worker/model_runner_base.h"
#include "worker/quant/quant_config.h"
#include "worker/tensor_parallel_group.h"
#if PAGODA_WORKER_HAS_NCCL
#include "worker/cuda/nccl_transport.h"
#endif

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::LoadModelRequest;
using pagoda::worker::v1::LoadModelResponse;
using pagoda::worker::v1::StepPlan;

absl::Status ValidateRequest(const LoadModelRequest& request) {
  if (request.device() != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("the CUDA model runner cannot run on device '", request.device(), "'"));
  }
  if (request.block_size() != 16 && request.block_size() != 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block size ", request.block_size(), " is not supported on CUDA (supported: 16, 32)"));
  }
  if (!(request.gpu_memory_utilization() > 0 && request.gpu_memory_utilization() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("gpu_memory_utilization must be in (0, 1], got ",
                                                   request.gpu_memory_utilization()));
  }
  if (absl::Status status = CheckWorkspaceLimits(request, 1); !status.ok()) return status;
  // A step of more sequences would fail in attention with a sticky error
  // (and the graph for a bucket that large could never be captured), so the
  // configuration is unservable: refuse it now, naming the limit.
  if (request.max_num_seqs() > kCudaMaxNumSeqs) {
    return absl::InvalidArgumentError(absl::StrCat("max_num_seqs ", request.max_num_seqs(),
                                                   " is not supported on CUDA (at most ",
                                                   kCudaMaxNumSeqs, ")"));
  }
  // A draft model or EAGLE head runs whole on rank 0 or sharded as the
  // target (docs/speculative-decoding.md); any other size is refused here,
  // before the device is touched.
  return ShardsDraftModel(request).status();
}

// Quantized weights: CudaBackend builds FP8 W8A8 linears
// (worker/cuda/cuda_fp8_linear.h) and int4/int8 ones (AWQ, GPTQ,
// compressed-tensors pack- and int-quantized: worker/cuda/cuda_int_linear.h), but
// none has run on a GPU yet, so the runner refuses every quantized
// checkpoint (and online FP8) in one line until scripts/gpu_check.sh has
// passed kernels_ops_fp8_linear_test, kernels_ops_int_linear_test and
// worker_cuda_model_test's quantized cases (docs/quantization.md).
absl::Status RefuseUnverifiedQuantizedWeights(const LoadModelRequest& request) {
  absl::StatusOr<QuantConfig> quant = LoadQuantConfig(request.model_dir());
  if (!quant.ok()) return quant.status();
  if (absl::Status status = CheckRequestedQuantization(&*quant, request.quantization());
      !status.ok()) {
    return status;
  }
  if (!quant->quantized()) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat(quant->Describe(),
                   ": served on --device cpu only so far (the CUDA quantized linears are built "
                   "but have not run on a GPU yet)"));
}

// How this build's CUDA ranks reach each other: NCCL, or nothing (a build
// without NCCL serves one rank only).
absl::StatusOr<GroupTransport> CudaTransport(int device, void* stream) {
#if PAGODA_WORKER_HAS_NCCL
  return NcclTransport(device, stream);
#else
  (void)device;
  (void)stream;
  return absl::UnimplementedError(
      "tensor parallelism on CUDA needs NCCL, and this pagoda-worker was built without it");
#endif
}

// The dtypes the CUDA runner serves the model of `request` in: activations
// and weights (serving), and the KV cache.
struct CudaDTypes {
  DType serving;
  DType kv_cache;
};

// Reads the model's config.json, checks that the CUDA kernels can run it, and
// resolves the request's --dtype and --kv-cache-dtype against its checkpoint.
absl::StatusOr<CudaDTypes> ResolveCudaDTypes(const LoadModelRequest& request) {
  absl::StatusOr<ModelConfig> config = LoadModelConfig(request.model_dir());
  if (!config.ok()) return config.status();
  if (absl::Status status = CheckCudaModelSupported(*config); !status.ok()) return status;
  auto requested_dtype = ParseDTypeFlag(request.dtype());
  if (!requested_dtype.ok()) return requested_dtype.status();
  auto serving = CudaServingDType(*requested_dtype, CheckpointDType(config->torch_dtype));
  if (!serving.ok()) return serving.status();
  auto requested_kv = ParseKvCacheDTypeFlag(request.kv_cache_dtype());
  if (!requested_kv.ok()) return requested_kv.status();
  auto kv_dtype = CudaKvCacheDType(*requested_kv, *serving);
  if (!kv_dtype.ok()) return kv_dtype.status();
  return CudaDTypes{.serving = *serving, .kv_cache = *kv_dtype};
}

struct DeviceMemory {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// The current device's free and total memory.
absl::StatusOr<DeviceMemory> QueryDeviceMemory() {
  DeviceMemory memory;
  if (cudaError_t e = cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaMemGetInfo: ", cudaGetErrorString(e)));
  }
  return memory;
}

// The profiling step: max_num_batched_tokens prompt tokens over as many
// sequences as max_num_seqs allows (none longer than the model's positions),
// every one sampled, each on its own blocks from 0 up.
StepPlan ProfilePlan(int tokens, int max_num_seqs, int max_positions, int block_size,
                     int* num_blocks) {
  int seqs = std::min(max_num_seqs, tokens);
  seqs = std::max(seqs, (tokens + max_positions - 1) / max_positions);
  StepPlan plan;
  int next_block = 0;
  for (int s = 0; s < seqs; ++s) {
    const int length = tokens / seqs + (s < tokens % seqs ? 1 : 0);
    auto* step = plan.add_sequences();
    step->set_seq_id(s);
    for (int t = 0; t < length; ++t) step->add_token_ids(t % 7);
    for (int b = 0; b < (length + block_size - 1) / block_size; ++b) {
      step->add_block_table(next_block++);
    }
    step->set_do_sample(true);
  }
  *num_blocks = next_block;
  return plan;
}

class CudaModelRunner final : public ModelRunnerBase {
 public:
  explicit CudaModelRunner(const CudaRunnerOptions& options) : options_(options) {}

  absl::StatusOr<LoadModelResponse> LoadModel(const LoadModelRequest& request) override {
    if (absl::Status status = CheckNotLoaded(); !status.ok()) return status;
    if (absl::Status status = ValidateRequest(request); !status.ok()) return status;
    if (absl::Status status = RefuseUnverifiedQuantizedWeights(request); !status.ok())
      return status;
    auto membership = ParseGroupMembership(request);
    if (!membership.ok()) return membership.status();
    auto dtypes = ResolveCudaDTypes(request);
    if (!dtypes.ok()) return dtypes.status();

    const int device = options_.device >= 0 ? options_.device : membership->rank;
    if (absl::Status joined =
            JoinGroupOnDevice(request.model_dir(), *membership, device, dtypes->serving);
        !joined.ok()) {
      return joined;
    }
    LOG(INFO) << "rank " << membership->rank << " of " << membership->world_size << " uses "
              << cuda_backend().DeviceDescription() << ", " << DTypeName(dtypes->serving);
    if (absl::Status loaded = LoadWeights(request, *dtypes); !loaded.ok()) return loaded;
    // The draft's weights and load-time workspace are on the device before
    // the profile below, so the KV blocks are sized with them in use.
    if (absl::Status loaded = LoadDraftModel(request, TargetLoadOptions(request, *dtypes));
        !loaded.ok()) {
      return loaded;
    }
    if (absl::Status status = CheckDraftSupported(); !status.ok()) return status;
    // Graphs only for a single rank: the NCCL communicator bounds every
    // all-reduce by polling its completion from the host (timeout, Abort,
    // NCCL's async errors), which cannot sit inside a captured graph; a
    // captured ncclAllReduce would replay unbounded, so a dead peer would
    // hang the step instead of failing it. Eager TP steps keep that bound.
    // An EAGLE head keeps them: its target's features (final_hidden, or an
    // EAGLE-3 target's aux rows) are device buffers at load-time addresses
    // that the graphs write, read by the head after the replay.
    enforce_eager_ = request.enforce_eager() || membership->world_size > 1;
    if (!enforce_eager_) ReserveGraphWorkspace();

    auto blocks = KvBlocksAfterProfile(request);
    if (!blocks.ok()) return blocks.status();
    LoadModelResponse response = LoadedModelResponse(*blocks);
    response.set_device_name(cuda_backend().DeviceDescription());
    response.set_max_model_len(CudaMaxModelLen(model_->config()));
    return response;
  }

  CudaGraphCounts graph_counts() const {
    if (graphs_ == nullptr) return CudaGraphCounts{};
    return CudaGraphCounts{
        .graphs = graphs_->num_graphs(),
        .verify_graphs = graphs_->num_verify_graphs(),
        .replays = graphs_->num_replays(),
        .verify_replays = graphs_->num_verify_replays(),
        .draft_graphs = draft_graphs_ ? draft_graphs_->num_graphs() : 0,
        .draft_replays = draft_graphs_ ? draft_graphs_->num_replays() : 0,
        .live = graphs_->buffers_unmoved() && (!draft_graphs_ || draft_graphs_->buffers_unmoved())};
  }

 private:
  // Only CudaBackend is ever stored in backend_ (JoinGroupOnDevice).
  CudaBackend& cuda_backend() const { return *static_cast<CudaBackend*>(backend_.get()); }

  void UseDevice() override { cuda_backend().MakeCurrent(); }

  void ReleaseCache() override {
    graphs_.reset();  // Its graphs point into the cache.
    if (draft_ != nullptr) draft_->set_pass_forward(nullptr);
    draft_graphs_.reset();  // And the draft's into the draft's.
    ModelRunnerBase::ReleaseCache();
  }

  // The graphs' split-K workspace (what CudaGraphRunner::Capture reserves),
  // taken before the memory profile so the KV blocks are sized with it in
  // use: the graphs are captured later, over the allocated cache, and must
  // need no memory the cache took.
  // A draft model's graphs share that workspace (one stream runs both), so
  // it is sized for the larger of the two now: a capture that grew it
  // would leave the other's graphs pointing at freed memory.
  void ReserveGraphWorkspace() {
    const int bucket = GraphBatchBuckets(max_num_seqs_).back();
    for (const LlamaModel* model : {model_.get(), DraftModelForGraphs()}) {
      if (model == nullptr) continue;
      const ModelConfig& config = model->config();
      cuda_backend().ReserveDecodeWorkspace(bucket, config.num_attention_heads,
                                            config.num_key_value_heads, config.head_dim,
                                            CudaMaxModelLen(config));
    }
  }
  // The draft model whose passes get decode graphs: a draft model on this
  // rank (an EAGLE head's passes go through ForwardEagle, eagerly).
  LlamaModel* DraftModelForGraphs() const {
    return draft_ != nullptr && !draft_->is_eagle() ? draft_->model() : nullptr;
  }

  // The draft model's passes 1.. (one row a sequence, each sampled: decode
  // batches) replay decode graphs over the draft and its cache; pass 0
  // and a step's last pass (no logits) run eagerly.
  absl::Status CaptureDraftGraphs() {
    LlamaModel* draft = DraftModelForGraphs();
    if (draft == nullptr) return absl::OkStatus();
    draft_graphs_ = std::make_unique<CudaGraphRunner>(draft, &cuda_backend(), draft_->cache(),
                                                      CudaMaxModelLen(draft->config()));
    if (absl::Status status = draft_graphs_->Capture(max_num_seqs_); !status.ok()) return status;
    draft_->set_pass_forward([this, draft](const FlatBatch& batch) {
      return draft_graphs_->CanRun(batch) ? draft_graphs_->Run(batch)
                                          : draft->Forward(batch, draft_->cache());
    });
    return absl::OkStatus();
  }

  // Captures the decode graphs over the new cache, unless eager.
  absl::Status OnCacheAllocated() override {
    if (!backend_->status().ok()) return backend_->status();
    if (enforce_eager_) return absl::OkStatus();
    const auto start = std::chrono::steady_clock::now();
    graphs_ = std::make_unique<CudaGraphRunner>(model_.get(), &cuda_backend(), cache_.get(),
                                                CudaMaxModelLen(model_->config()));
    // Speculative decoding's verify steps (k + 1 rows a sequence) get graphs
    // of their own at small batch, within the load-time workspace. Only
    // under a draft model or EAGLE head for now, which the server refuses
    // on CUDA until a GPU run passes worker_cuda_draft_test and
    // worker_cuda_graph_test: the n-gram method, served on CUDA today, keeps
    // its eager verify steps until then (then drop serves_draft_ here).
    if (num_speculative_tokens_ > 0 && serves_draft_) {
      graphs_->EnableVerifyGraphs(num_speculative_tokens_ + 1, max_num_batched_tokens_);
    }
    if (absl::Status status = graphs_->Capture(max_num_seqs_); !status.ok()) return status;
    if (absl::Status status = CaptureDraftGraphs(); !status.ok()) return status;
    LOG(INFO) << "captured " << graphs_->num_graphs() << " decode, " << graphs_->num_verify_graphs()
              << " verify and " << (draft_graphs_ ? draft_graphs_->num_graphs() : 0)
              << " draft CUDA graphs in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s";
    return absl::OkStatus();
  }

  // A decode step (or, with drafts, a verify step of up to k + 1 rows a
  // sequence) that fits a captured bucket replays its graph; one that
  // wants prompt logprobs runs eagerly (the graphs keep no hidden states),
  // and so does one with LoRA rows (its adapters are kernel arguments chosen
  // per step; the graphs were captured without adapters).
  absl::StatusOr<ForwardOutput> RunForward(const FlatBatch& batch) override {
    const bool graphed = graphs_ != nullptr && !batch.wants_prompt_logprobs() && !batch.uses_lora &&
                         graphs_->CanRun(batch);
    return graphed ? graphs_->Run(batch) : model_->Forward(batch, cache_.get());
  }

  // Makes the backend on `device` and joins the group through the path the
  // CPU runner takes too (JoinGroup), over NCCL on the backend's stream. The
  // backend is made inside the transport, after JoinGroup checked that the
  // model splits, so a group that cannot form is refused alike on every rank,
  // before any device work; one rank needs no NCCL.
  absl::Status JoinGroupOnDevice(const std::string& model_dir, const GroupMembership& membership,
                                 int device, DType serving) {
    // What a failed earlier load left, communicator before the stream it uses.
    ReleaseCommunicator();
    backend_.reset();
    auto make_backend = [&]() -> absl::Status {
      auto backend = CudaBackend::Create(device, serving);
      if (!backend.ok()) return backend.status();
      (*backend)->set_decode_fusions(options_.decode_fusions);
      backend_ = *std::move(backend);
      return absl::OkStatus();
    };
    const GroupTransport over_nccl =
        [&](const GroupMembership& group) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      if (absl::Status made = make_backend(); !made.ok()) return made;
      auto transport = CudaTransport(device, cuda_backend().stream());
      if (!transport.ok()) return transport.status();
      return (*transport)(group);
    };
    auto communicator = JoinGroup(membership, model_dir, over_nccl);
    if (!communicator.ok()) return communicator.status();
    if (backend_ == nullptr) {
      if (absl::Status made = make_backend(); !made.ok()) return made;
    }
    AdoptCommunicator(*std::move(communicator));
    return absl::OkStatus();
  }

  // Weights are this rank's slices (sharded_weights.h), uploaded in the
  // serving dtype; its KV blocks hold its own KV heads only.
  absl::Status LoadWeights(const LoadModelRequest& request, const CudaDTypes& dtypes) {
    auto model = LlamaModel::Load(request.model_dir(), backend_.get(), timed_.get(),
                                  TargetLoadOptions(request, dtypes));
    if (!model.ok()) return model.status();
    if (request.max_loras() > 0) {
      LOG(INFO) << "LoRA: " << request.max_loras() << " adapter slots of rank up to "
                << request.max_lora_rank() << " on the device; up to " << LoraCacheCapacity(**model)
                << " adapters cached on the host";
    }
    if (!backend_->status().ok()) return backend_->status();
    model_ = *std::move(model);
    block_size_ = request.block_size();
    kv_cache_dtype_ = dtypes.kv_cache;
    max_num_seqs_ = request.max_num_seqs();
    max_num_batched_tokens_ = request.max_num_batched_tokens();
    num_speculative_tokens_ = request.num_speculative_tokens();
    return absl::OkStatus();
  }

  // The target's load options; a draft model or EAGLE head gets them too
  // (DraftModel keeps the dtype and the workspace sizes, drops the LoRA
  // fields and the quantization). The lm_head stays whole on rank 0 (the
  // layout verified on two GPUs) until worker_cuda_tensor_parallel_test's
  // two-GPU case, which loads it split over the vocabulary, passes in
  // scripts/gpu_check.sh (row cuda_worker_nccl); then drop the flag.
  LlamaLoadOptions TargetLoadOptions(const LoadModelRequest& request, const CudaDTypes& dtypes) {
    return LlamaLoadOptions{.weight_dtype = dtypes.serving,
                            .max_num_batched_tokens = request.max_num_batched_tokens(),
                            .max_num_seqs = request.max_num_seqs(),
                            .num_speculative_tokens = request.num_speculative_tokens(),
                            .whole_lm_head_on_rank0 = true,
                            .block_size = request.block_size(),
                            .quantization = request.quantization(),
                            .max_loras = request.max_loras(),
                            .max_lora_rank = request.max_lora_rank(),
                            .max_cpu_loras = request.max_cpu_loras(),
                            .max_lora_trainable_tokens = request.max_lora_trainable_tokens(),
                            .lora_device = CudaLoraFactory()};
  }
  // The draft's layers run on the target's kernels: the same head sizes
  // and GQA groups (CheckCudaModelSupported), refused naming the draft.
  absl::Status CheckDraftSupported() const {
    if (!backend_->status().ok()) return backend_->status();
    if (draft_ == nullptr) return absl::OkStatus();
    const absl::Status status = CheckCudaModelSupported(draft_->config());
    if (status.ok()) return status;
    return absl::InvalidArgumentError(
        absl::StrCat(draft_->is_eagle() ? "EAGLE head: " : "draft model: ", status.message()));
  }

  // The slots' device store (worker/cuda/cuda_lora_slots.h), made by
  // LlamaModel::Load before the memory profile, so the KV cache is sized
  // with the slots' memory in use.
  LlamaLoadOptions::LoraDeviceFactory CudaLoraFactory() {
    return [this](const LoraSlots& slots,
                  int max_tokens) -> absl::StatusOr<std::shared_ptr<LoraDeviceSlots>> {
      auto device = CudaLoraSlots::Create(&cuda_backend(), slots, max_tokens);
      if (!device.ok()) return device.status();
      return std::shared_ptr<LoraDeviceSlots>(*std::move(device));
    };
  }
  static int LoraCacheCapacity(const LlamaModel& model) {
    return model.lora_loader() != nullptr ? model.lora_loader()->cache_capacity() : 0;
  }

  // The KV blocks that gpu_memory_utilization of device memory holds once
  // the profiled step's peak is taken.
  absl::StatusOr<int32_t> KvBlocksAfterProfile(const LoadModelRequest& request) {
    // The target's block and the draft's, which share every block id.
    const int64_t bytes_per_block = BytesPerBlock();
    auto peak = ProfilePeakBytes(request);
    if (!peak.ok()) return peak.status();
    auto memory = QueryDeviceMemory();
    if (!memory.ok()) return memory.status();
    auto blocks = KvBlocksFromProfile(static_cast<int64_t>(memory->total_bytes),
                                      request.gpu_memory_utilization(), *peak, bytes_per_block);
    if (!blocks.ok()) return blocks.status();
    LOG(INFO) << "weights " << model_->weight_bytes() / (1 << 20) << " MiB, profiled peak "
              << *peak / (1 << 20) << " MiB of " << memory->total_bytes / (1 << 20)
              << " MiB: " << *blocks << " KV blocks of " << bytes_per_block << " bytes";
    return blocks;
  }

  // Device memory in use after one forward pass and sampling of the largest
  // step, on a scratch cache just big enough for it (freed before measuring).
  absl::StatusOr<int64_t> ProfilePeakBytes(const LoadModelRequest& request) {
    int num_blocks = 0;
    const StepPlan plan = ProfilePlan(request.max_num_batched_tokens(), request.max_num_seqs(),
                                      CudaMaxModelLen(model_->config()), block_size_, &num_blocks);
    auto scratch = std::make_unique<CacheEngine>(backend_.get(), CacheShape(), num_blocks, 0);
    auto batch = FlattenStepPlan(
        plan, scratch->Limits(model_->config().vocab_size, model_->max_positions()));
    if (!batch.ok()) return batch.status();
    auto output = model_->Forward(*batch, scratch.get());
    if (!output.ok()) return output.status();
    if (timed_->rank() == 0) backend_->Sample(output->logits, output->sampling, &samples_);
    cuda_backend().Synchronize();
    if (!backend_->status().ok()) return backend_->status();
    // The scratch cache is KV memory, which is what this profile sizes: left
    // allocated it would be counted as peak and its blocks taken twice from
    // the budget (max_num_batched_tokens tokens of KV lost for good).
    // cudaFree hands the memory straight back, so the measure below sees it.
    scratch.reset();
    auto memory = QueryDeviceMemory();
    if (!memory.ok()) return memory.status();
    // In use = everything on the device now (this process's context, weights,
    // workspaces, and any other process): conservative. All of the forward's
    // own memory (workspace, GEMM and sampling scratch) persists, so what is
    // in use after the pass is its peak.
    return static_cast<int64_t>(memory->total_bytes - memory->free_bytes);
  }

  CudaRunnerOptions options_;
  // Destroyed before the base's cache, which its graphs point into.
  std::unique_ptr<CudaGraphRunner> graphs_;
  std::unique_ptr<CudaGraphRunner> draft_graphs_;  // Over the draft's cache.
  int max_num_seqs_ = 0;
  int max_num_batched_tokens_ = 0;
  int num_speculative_tokens_ = 0;
  bool enforce_eager_ = false;
};

}  // namespace

std::unique_ptr<ModelRunner> CreateCudaModelRunner(const CudaRunnerOptions& options) {
  return std::make_unique<CudaModelRunner>(options);
}

CudaGraphCounts CudaRunnerGraphCounts(const ModelRunner& runner) {
  const auto* cuda = dynamic_cast<const CudaModelRunner*>(&runner);
  return cuda != nullptr ? cuda->graph_counts() : CudaGraphCounts{};
}

}  // namespace pagoda::worker
