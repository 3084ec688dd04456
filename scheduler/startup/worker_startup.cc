#include "scheduler/startup/worker_startup.h"

#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/tls_credentials.h"
#include "glog/logging.h"
#include "scheduler/engine/step_plan_bound.h"
#include "wire/limits.h"
#include "wire/worker_secret.h"

namespace pagoda::scheduler {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string DefaultWorkerBinary() {
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return "pagoda-worker";
  const std::filesystem::path dir = std::filesystem::path(std::string(buffer, n)).parent_path();
  // Installed side by side; in a build tree the worker has its own folder.
  for (const std::filesystem::path& candidate :
       {dir / "pagoda-worker", dir.parent_path() / "worker" / "pagoda-worker"}) {
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return (dir / "pagoda-worker").string();
}

// The receive limit the workers need: the largest step plan this server can
// send (MaxStepPlanBytes), within the range pagoda-worker takes. A bound
// over the worker channel's ceiling is logged: a step that large would fail.
int WorkerReceiveLimit(const ServerConfig& config, const ModelConfig& model) {
  const int64_t bound =
      MaxStepPlanBytes({.max_num_seqs = config.scheduling.max_num_seqs,
                        .max_num_batched_tokens = config.scheduling.max_num_batched_tokens,
                        .max_model_len = config.model.max_model_len,
                        .block_size = config.cache.block_size,
                        .vocab_size = model.vocab_size,
                        .num_eos_token_ids = static_cast<int>(model.eos_token_ids.size())});
  if (bound > wire::kMaxWorkerMessageBytes) {
    LOG(WARNING) << "a step plan at every limit (--max-num-seqs, --max-num-batched-tokens, "
                 << "--max-model-len, the per-request bounds) could reach " << bound
                 << " bytes, over the worker channel's " << wire::kMaxWorkerMessageBytes
                 << "; a step that large would fail";
  }
  return static_cast<int>(
      std::clamp<int64_t>(bound, wire::kMinWorkerReceiveLimitBytes, wire::kMaxWorkerMessageBytes));
}

GrpcWorkerGroupOptions MakeWorkerGroupOptions(const ServerConfig& config,
                                              const ModelConfig& model) {
  const WorkerOptions& workers = config.workers;
  GrpcWorkerGroupOptions options;
  options.max_restarts = workers.restart_limit;
  options.restart_window = absl::Seconds(workers.restart_window);
  options.restart_start_timeout = absl::Seconds(workers.start_timeout);
  options.rendezvous_host = workers.rendezvous_host;
  options.rendezvous_port = workers.rendezvous_port;
  options.collective_timeout = absl::Seconds(workers.collective_timeout);
  options.stall_timeout = absl::Seconds(workers.stall_timeout);
  options.worker_receive_limit_bytes = WorkerReceiveLimit(config, model);
  LOG(INFO) << "largest step plan: " << options.worker_receive_limit_bytes
            << " bytes (the workers' --max-message-bytes)";
  return options;
}

// Workers started elsewhere (--worker-addresses): they prove nothing about
// themselves but the secret and, with TLS, their certificates.
absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> ConnectWorkers(const WorkerOptions& workers,
                                                                GrpcWorkerGroupOptions options) {
  absl::StatusOr<std::string> secret = ReadWorkerSecretFile(workers.secret_file);
  if (!secret.ok()) return secret.status();
  const TlsFiles tls{workers.ssl_certfile, workers.ssl_keyfile, workers.ssl_ca_certs};
  // Without TLS the group reaches each worker as it serves (null: local
  // credentials on loopback, plaintext beyond).
  if (tls.given()) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(tls, "--worker-");
    if (!credentials.ok()) return credentials.status();
    options.connect_credentials = *credentials;
    options.tls_server_name = workers.ssl_server_name;
  }
  return GrpcWorkerGroup::Connect(workers.addresses, *secret, absl::Seconds(workers.start_timeout),
                                  options);
}

// Workers this server spawns and owns; their pids go to stdout for launchers.
absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> LaunchWorkers(
    const WorkerOptions& workers, const GrpcWorkerGroupOptions& options) {
  const std::string binary = workers.binary.empty() ? DefaultWorkerBinary() : workers.binary;
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> group = GrpcWorkerGroup::Launch(
      binary, workers.tensor_parallel_size, absl::Seconds(workers.start_timeout), options);
  if (!group.ok()) return group.status();
  std::cout << "PAGODA_WORKER_PIDS " << absl::StrJoin((*group)->worker_pids(), ",") << std::endl;
  return group;
}

// A worker may serve shorter contexts than the model (CUDA: its rotary
// table's bound): an explicit --max-model-len past that is an error, the
// default is cut to it.
absl::StatusOr<int> ServedMaxModelLen(const ServerConfig& config, int worker_limit) {
  const int max_model_len = config.model.max_model_len;
  if (worker_limit <= 0 || max_model_len <= worker_limit) return max_model_len;
  if (config.model.max_model_len_given) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-model-len ", max_model_len, " exceeds the ", worker_limit,
                     " tokens the workers serve on --device ", config.workers.device));
  }
  LOG(WARNING) << "max_model_len " << max_model_len << " cut to the workers' " << worker_limit;
  return worker_limit;
}

}  // namespace

pagoda::worker::v1::LoadModelRequest MakeLoadModelRequest(const ServerConfig& config) {
  pagoda::worker::v1::LoadModelRequest load;
  load.set_model_dir(std::filesystem::absolute(config.model.model_dir).string());
  load.set_world_size(config.workers.tensor_parallel_size);
  load.set_block_size(config.cache.block_size);
  load.set_device(config.workers.device);
  load.set_kv_cache_memory_bytes(static_cast<int64_t>(config.cache.cpu_kv_cache_space_gib * kGiB));
  load.set_gpu_memory_utilization(static_cast<float>(config.cache.gpu_memory_utilization));
  load.set_max_num_batched_tokens(config.scheduling.max_num_batched_tokens);
  load.set_max_num_seqs(config.scheduling.max_num_seqs);
  load.set_dtype(config.model.dtype);
  load.set_kv_cache_dtype(config.model.kv_cache_dtype);
  load.set_quantization(config.model.quantization);
  load.set_cpu_weight_only_activations(config.model.cpu_weight_only_activations);
  load.set_cpu_threads(config.workers.cpu_threads);
  load.set_enforce_eager(config.workers.enforce_eager);
  // Every method's verify steps carry k + 1 rows a sequence: the workers
  // size their workspaces for them at load (before CUDA graph capture).
  if (config.speculative.has_value()) {
    load.set_num_speculative_tokens(config.speculative->num_speculative_tokens);
  }
  if (config.speculative.has_value() && config.speculative->method != SpeculativeMethod::kNgram) {
    load.set_draft_model_dir(std::filesystem::absolute(config.speculative->model).string());
    load.set_draft_quantization(config.speculative->quantization);
    load.set_draft_is_eagle_head(config.speculative->method == SpeculativeMethod::kEagle);
    load.set_draft_is_eagle3_head(config.speculative->method == SpeculativeMethod::kEagle3);
    load.set_draft_tensor_parallel_size(
        DraftTensorParallelSize(*config.speculative, config.workers.tensor_parallel_size));
  }
  if (config.lora.enable_lora) {  // Slots on every rank (docs/lora.md).
    load.set_max_loras(config.lora.max_loras);
    load.set_max_lora_rank(config.lora.max_lora_rank);
    load.set_max_cpu_loras(config.lora.max_cpu_loras);
    load.set_max_lora_trainable_tokens(config.lora.max_lora_trainable_tokens);
  }
  return load;
}

absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> StartWorkers(const ServerConfig& config,
                                                              const ModelConfig& model) {
  GrpcWorkerGroupOptions options = MakeWorkerGroupOptions(config, model);
  if (!config.workers.addresses.empty()) return ConnectWorkers(config.workers, std::move(options));
  return LaunchWorkers(config.workers, options);
}

absl::StatusOr<WorkerCache> LoadModelOnWorkers(const ServerConfig& config,
                                               GrpcWorkerGroup& workers) {
  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> loaded =
      workers.LoadModel(MakeLoadModelRequest(config));
  if (!loaded.ok()) return loaded.status();
  WorkerCache cache;
  absl::StatusOr<int> max_model_len = ServedMaxModelLen(config, loaded->max_model_len());
  if (!max_model_len.ok()) return max_model_len.status();
  cache.max_model_len = *max_model_len;
  if (!loaded->device_name().empty()) LOG(INFO) << "workers run on " << loaded->device_name();
  cache.num_gpu_blocks = config.cache.num_gpu_blocks_override;
  if (cache.num_gpu_blocks <= 0) cache.num_gpu_blocks = loaded->num_gpu_blocks();
  if (cache.num_gpu_blocks <= 0) {
    return absl::ResourceExhaustedError(
        "no KV blocks fit the memory budget; raise --cpu-kv-cache-space / "
        "--gpu-memory-utilization (on a GPU, memory other processes hold counts against it)");
  }
  cache.num_cpu_blocks =
      loaded->bytes_per_block() > 0
          ? static_cast<int>(config.cache.swap_space_gib * kGiB / loaded->bytes_per_block())
          : 0;
  pagoda::worker::v1::InitCacheRequest init;
  init.set_num_gpu_blocks(cache.num_gpu_blocks);
  init.set_num_cpu_blocks(cache.num_cpu_blocks);
  if (absl::Status status = workers.InitCache(init); !status.ok()) return status;
  LOG(INFO) << "KV cache: " << cache.num_gpu_blocks << " blocks of " << config.cache.block_size
            << " tokens, " << cache.num_cpu_blocks << " swap blocks";
  return cache;
}

}  // namespace pagoda::scheduler
