#include "scheduler/config/server_config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/flag_checks.h"
#include "common/quantization_methods.h"
#include "common/sampling_limits.h"
#include "common/tensor_parallel_plan.h"
#include "scheduler/api/generation_config.h"
#include "scheduler/api/http_server.h"
#include "scheduler/api/reasoning.h"
#include "scheduler/api/tool_calls.h"
#include "scheduler/spec/draft_model_config.h"
#include "wire/limits.h"

namespace pagoda::scheduler {
namespace {

// The upper bounds no flag of this kind needs to pass: each keeps a typo
// from asking for a million threads or a terabyte.
constexpr int kMaxThreads = 1024;
constexpr int kMaxQueued = 1 << 20;
// A log line's cut: 16M ids or characters (a prompt's worth and more).
constexpr int kMaxLogLen = 1 << 24;
constexpr double kMaxGiB = 4096;
constexpr double kMaxSeconds = 86400;
constexpr int kMaxBlocks = 1 << 24;

using flag_check::FirstError;
using flag_check::Port;
using flag_check::Range;
using flag_check::RealRange;

absl::Status CheckModel(const ModelOptions& model) {
  if (model.model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  std::error_code error;
  if (std::filesystem::exists(model.model_dir, error) &&
      !std::filesystem::is_directory(model.model_dir, error)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model ", model.model_dir, " is not a directory"));
  }
  if (auto dtype = ParseDTypeFlag(model.dtype); !dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: ", dtype.status().message()));
  }
  if (auto kv = ParseKvCacheDTypeFlag(model.kv_cache_dtype); !kv.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype: ", kv.status().message()));
  }
  if (!IsServedQuantizationMethod(model.quantization)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantization ", model.quantization, ": Pagoda serves ", kServedQuantizationMethodsText));
  }
  if (!IsCpuWeightOnlyActivations(model.cpu_weight_only_activations) ||
      model.cpu_weight_only_activations.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--cpu-weight-only-activations ",
                                                   model.cpu_weight_only_activations,
                                                   ": expected int8 or float32"));
  }
  if (auto parser = ParseToolCallParserName(model.tool_call_parser); !parser.ok()) {
    return parser.status();
  }
  if (absl::Status status = CheckReasoningParserName(model.reasoning_parser); !status.ok()) {
    return status;
  }
  if (absl::Status status = CheckSamplingOverride(model.override_generation_config); !status.ok()) {
    return status;
  }
  if (model.enable_auto_tool_choice && model.tool_call_parser.empty()) {
    return absl::InvalidArgumentError(
        "--enable-auto-tool-choice needs --tool-call-parser (hermes or llama3_json)");
  }
  if (absl::Status status = Range("max-logprobs", model.max_logprobs, 0, kMaxTopLogprobs);
      !status.ok()) {
    return status;
  }
  return Range("max-model-len", model.max_model_len, 0, wire::kMaxWorkspaceTokens);
}

// vLLM's VLLM_LOG_STATS_INTERVAL, an environment variable: named as one.
absl::Status CheckLogStatsInterval(double seconds) {
  if (seconds > 0 && seconds <= kMaxSeconds) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("VLLM_LOG_STATS_INTERVAL: expected seconds over 0, at most ", kMaxSeconds));
}

// A role goes into every chat answer's JSON: printable ASCII, bounded.
absl::Status CheckResponseRole(const std::string& role) {
  const bool printable =
      std::all_of(role.begin(), role.end(), [](char c) { return c > ' ' && c < 127; });
  if (!role.empty() && role.size() <= 64 && printable) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--response-role ", role,
                   " is not a role: expected 1 to 64 printable ASCII characters "
                   "without spaces"));
}

absl::Status CheckFrontDoor(const FrontDoorOptions& door) {
  return FirstError({
      Port("port", door.port, 0, "0 (the OS picks)"),
      Port("http-port", door.http_port, -1, "0 (off), -1 (the OS picks)"),
      Port("metrics-port", door.metrics_port, -1, "0 (off), -1 (the OS picks)"),
      Range("http-max-connections", door.http_max_connections, 1, kMaxQueued),
      Range("http-io-threads", door.http_io_threads, 1, kMaxHttpIoThreads),
      Range("max-stream-queued-messages", door.max_stream_queued_messages, 1, kMaxQueued),
      RealRange("drain-timeout", door.drain_timeout, 0, kMaxSeconds, true),
      CheckLogStatsInterval(door.log_stats_interval),
      Range("max-log-len", door.max_log_len, -1, kMaxLogLen),
      CheckResponseRole(door.response_role),
      door.log_outputs && !door.log_requests
          ? absl::InvalidArgumentError("--enable-log-outputs needs --enable-log-requests, as "
                                       "in vLLM")
          : absl::OkStatus(),
  });
}

absl::Status CheckScheduling(const SchedulingOptions& scheduling) {
  return FirstError({
      Range("max-num-seqs", scheduling.max_num_seqs, 1, wire::kMaxWorkspaceTokens),
      Range("max-num-batched-tokens", scheduling.max_num_batched_tokens, 0,
            wire::kMaxWorkspaceTokens),
      Range("max-num-partial-prefills", scheduling.max_num_partial_prefills, 1,
            scheduling.max_num_seqs),
      Range("max-long-partial-prefills", scheduling.max_long_partial_prefills, 1,
            scheduling.max_num_partial_prefills),
      Range("long-prefill-token-threshold", scheduling.long_prefill_token_threshold, 0,
            wire::kMaxWorkspaceTokens),
      Range("max-queued-requests", scheduling.max_queued_requests, 1, kMaxQueued),
  });
}

absl::Status CheckCache(const CacheOptions& cache) {
  return FirstError({
      Range("block-size", cache.block_size, 1, 1024),
      RealRange("gpu-memory-utilization", cache.gpu_memory_utilization, 0, 1, false),
      Range("num-gpu-blocks-override", cache.num_gpu_blocks_override, 0, kMaxBlocks),
      RealRange("cpu-kv-cache-space", cache.cpu_kv_cache_space_gib, 0, kMaxGiB, false),
      RealRange("swap-space", cache.swap_space_gib, 0, kMaxGiB, true),
  });
}

absl::Status CheckWorkerTls(const WorkerOptions& workers) {
  const bool tls = !workers.ssl_certfile.empty() || !workers.ssl_keyfile.empty() ||
                   !workers.ssl_ca_certs.empty();
  if (workers.addresses.empty()) {
    if (tls || !workers.ssl_server_name.empty()) {
      return absl::InvalidArgumentError(
          "--worker-ssl-* are for --worker-addresses workers; spawned workers serve a private "
          "unix socket");
    }
    return absl::OkStatus();
  }
  if (static_cast<int>(workers.addresses.size()) != workers.tensor_parallel_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker-addresses has ", workers.addresses.size(),
                     " entries for --tensor-parallel-size ", workers.tensor_parallel_size));
  }
  if (workers.secret_file.empty()) {
    return absl::InvalidArgumentError("--worker-addresses needs --worker-secret-file");
  }
  if (workers.ssl_ca_certs.empty() && !workers.ssl_server_name.empty()) {
    return absl::InvalidArgumentError("--worker-ssl-server-name needs --worker-ssl-ca-certs");
  }
  return absl::OkStatus();
}

absl::Status CheckWorkers(const WorkerOptions& workers) {
  if (workers.device != "cpu" && workers.device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: expected cpu or cuda, got '", workers.device, "'"));
  }
  if (in_addr address; inet_pton(AF_INET, workers.rendezvous_host.c_str(), &address) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rendezvous-host must be an IPv4 address, got '", workers.rendezvous_host, "'"));
  }
  return FirstError({
      Range("tensor-parallel-size", workers.tensor_parallel_size, 1, wire::kMaxWorldSize),
      Range("cpu-threads", workers.cpu_threads, 0, kMaxThreads),
      Range("worker-restart-limit", workers.restart_limit, 0, 1000),
      RealRange("worker-restart-window", workers.restart_window, 0, kMaxSeconds, false),
      RealRange("worker-failure-exit-delay", workers.failure_exit_delay, 0, 600, true),
      RealRange("worker-stall-timeout", workers.stall_timeout, 0.5, 3600, true),
      RealRange("worker-start-timeout", workers.start_timeout, 0, 3600, false),
      RealRange("collective-timeout", workers.collective_timeout, 0, 600, false),
      Range("rendezvous-port", workers.rendezvous_port, 0, 65535),
      CheckWorkerTls(workers),
  });
}

absl::Status CheckKvEvents(const KvEventOptions& events, bool prefix_caching) {
  if (absl::Status ranges = FirstError(
          {Range("kv-events-queue-batches", events.queue_batches, 1, kMaxKvEventBatches),
           Range("kv-events-replay-buffer", events.replay_buffer, 0, kMaxKvEventBatches),
           Range("kv-events-config.hwm", events.send_high_water_mark, 1, kMaxKvEventBatches)});
      !ranges.ok()) {
    return ranges;
  }
  if (events.endpoint.empty()) {
    return events.replay_endpoint.empty()
               ? absl::OkStatus()
               : absl::InvalidArgumentError(
                     "--kv-events-replay-endpoint needs --kv-events-endpoint");
  }
  if (!prefix_caching) {
    return absl::InvalidArgumentError(
        "KV events (--kv-events-endpoint, or --kv-events-config's enable_kv_cache_events) "
        "need prefix caching (drop --no-enable-prefix-caching)");
  }
  return absl::OkStatus();
}

// The token budget and chunking defaults of vLLM, and the rules that need
// the resolved max_model_len.
absl::Status ResolveChunking(int max_model_len, SchedulingOptions& scheduling) {
  if (scheduling.max_num_batched_tokens == 0) {
    // Without chunks a step must hold the longest prompt; with them vLLM's
    // online serving budget keeps steps short.
    scheduling.max_num_batched_tokens =
        scheduling.enable_chunked_prefill ? 2048 : std::max(max_model_len, 2048);
  }
  if (absl::Status status = Range("long-prefill-token-threshold",
                                  scheduling.long_prefill_token_threshold, 0, max_model_len);
      !status.ok()) {
    return status;
  }
  if (!scheduling.enable_chunked_prefill &&
      (scheduling.max_num_partial_prefills > 1 || scheduling.long_prefill_token_threshold > 0)) {
    return absl::InvalidArgumentError(
        "--max-num-partial-prefills > 1 and --long-prefill-token-threshold need chunked prefill");
  }
  if (scheduling.max_num_partial_prefills > 1 && scheduling.long_prefill_token_threshold == 0) {
    scheduling.long_prefill_token_threshold = std::max(1, max_model_len * 4 / 100);
  }
  return absl::OkStatus();
}

// What the engine runs of --speculative-config: prompt lookup, and a draft
// model (at draft tensor-parallel size 1 or the target's), an EAGLE or an
// EAGLE-3 head (at size 1) on the CPU worker. The draft's files are checked against the
// target's at start (scheduler/startup/draft_model_files.h).
absl::Status CheckSpeculation(const std::optional<SpeculativeConfig>& speculative,
                              const WorkerOptions& workers) {
  if (!speculative.has_value()) return absl::OkStatus();
  const SpeculativeMethod method = speculative->method;
  if (absl::Status status = CheckAgainstTarget(*speculative, workers.tensor_parallel_size);
      !status.ok() || method == SpeculativeMethod::kNgram) {
    return status;
  }
  return CheckDraftModelPlacement(*speculative, workers.device, workers.tensor_parallel_size);
}

// ValidateLoraOptions on a copy (it fills defaults), and the device: only
// the CPU worker applies adapters so far.
absl::Status CheckLora(const lora::LoraOptions& options, const WorkerOptions& workers) {
  lora::LoraOptions checked = options;
  if (absl::Status status = lora::ValidateLoraOptions(checked); !status.ok()) return status;
  if (options.enable_lora && workers.device != "cpu") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--enable-lora is served on --device cpu only so far, got --device ", workers.device));
  }
  return absl::OkStatus();
}

// An FP8 KV cache on the device: the CUDA worker's kernels for it are
// written and built but have not run on a GPU yet (docs/quantization.md,
// "CUDA"), so until scripts/gpu_check.sh has passed them the server serves
// it on --device cpu only, as it does --enable-lora.
absl::Status CheckFp8KvCacheDevice(const ModelOptions& model, const WorkerOptions& workers) {
  absl::StatusOr<std::optional<DType>> kv = ParseKvCacheDTypeFlag(model.kv_cache_dtype);
  if (workers.device == "cpu" || !kv.ok() || !kv->has_value() ||
      (**kv != DType::kFp8E4M3 && **kv != DType::kFp8E5M2)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype ", model.kv_cache_dtype,
                                                 " is served on --device cpu only so far, got "
                                                 "--device ",
                                                 workers.device));
}

}  // namespace

// The values of vLLM's no-op flags whose behaviour Pagoda has.
absl::Status CheckVllmNoOps(const VllmNoOpFlags& flags) {
  if (flags.load_format != "auto" && flags.load_format != "safetensors") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--load-format ", flags.load_format, ": Pagoda reads safetensors (auto or safetensors)"));
  }
  if (!flags.distributed_executor_backend.empty() && flags.distributed_executor_backend != "mp") {
    return absl::InvalidArgumentError(absl::StrCat("--distributed-executor-backend ",
                                                   flags.distributed_executor_backend,
                                                   ": Pagoda's workers are processes (mp)"));
  }
  static constexpr absl::string_view kUvicornLevels[] = {"debug", "info",     "warning",
                                                         "error", "critical", "trace"};
  if (std::find(std::begin(kUvicornLevels), std::end(kUvicornLevels), flags.uvicorn_log_level) ==
      std::end(kUvicornLevels)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--uvicorn-log-level ", flags.uvicorn_log_level,
                     ": expected debug, info, warning, error, critical or trace"));
  }
  return absl::OkStatus();
}

std::string DescribeVllmNoOpFlags(const VllmNoOpFlags& flags) {
  std::vector<std::string> given;
  if (flags.trust_remote_code) given.push_back("--trust-remote-code");
  if (flags.disable_custom_all_reduce) given.push_back("--disable-custom-all-reduce");
  if (flags.load_format != "auto") given.push_back("--load-format " + flags.load_format);
  if (!flags.distributed_executor_backend.empty()) {
    given.push_back("--distributed-executor-backend " + flags.distributed_executor_backend);
  }
  if (flags.disable_uvicorn_access_log) given.push_back("--disable-uvicorn-access-log");
  if (flags.disable_fastapi_docs) given.push_back("--disable-fastapi-docs");
  if (flags.uvicorn_log_level != "info") {
    given.push_back("--uvicorn-log-level " + flags.uvicorn_log_level);
  }
  if (given.empty()) return "";
  return absl::StrCat("vLLM's ", absl::StrJoin(given, ", "),
                      ": taken, no effect here (docs/configuration.md)");
}

absl::Status CheckServerConfig(const ServerConfig& config) {
  return FirstError({
      CheckVllmNoOps(config.vllm_no_ops),
      CheckModel(config.model),
      CheckFrontDoor(config.front_door),
      CheckScheduling(config.scheduling),
      CheckCache(config.cache),
      CheckWorkers(config.workers),
      CheckKvEvents(config.kv_events, config.scheduling.enable_prefix_caching),
      CheckSpeculation(config.speculative, config.workers),
      CheckLora(config.lora, config.workers),
      CheckFp8KvCacheDevice(config.model, config.workers),
  });
}

absl::Status ResolveForModel(const ModelConfig& model, ServerConfig* config) {
  int& max_model_len = config->model.max_model_len;
  config->model.max_model_len_given = max_model_len > 0;
  if (max_model_len <= 0) max_model_len = model.max_position_embeddings;
  if (max_model_len > model.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-model-len ", max_model_len, " exceeds the model's ",
                     "max_position_embeddings ", model.max_position_embeddings));
  }
  if (absl::Status status = ResolveChunking(max_model_len, config->scheduling); !status.ok()) {
    return status;
  }
  // Refused before any worker starts, in one line naming the counts.
  return CheckTensorParallelSplit(model, config->workers.tensor_parallel_size);
}

std::string ServedModelName(const ModelOptions& model) { return ServedModelNames(model).front(); }

std::vector<std::string> ServedModelNames(const ModelOptions& model) {
  std::vector<std::string> names =
      absl::StrSplit(model.served_model_name, ' ', absl::SkipWhitespace());
  if (!names.empty()) return names;
  const std::filesystem::path dir = std::filesystem::path(model.model_dir).lexically_normal();
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  return {name};
}

}  // namespace pagoda::scheduler
