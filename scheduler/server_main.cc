// pagoda-server: the scheduler process. Loads the model's config and
// tokenizer, launches (or connects to) the workers, sizes the KV cache, then
// serves pagoda.v1.Generation until SIGTERM/SIGINT, when it drains.
//
// After binding it prints "PAGODA_SERVER_LISTENING <port>" (and, with
// metrics on, "PAGODA_METRICS_LISTENING <port>"; with spawned workers,
// "PAGODA_WORKER_PIDS <pid>,...") to stdout, so launchers that asked for
// port 0 learn the ports.

#include <arpa/inet.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/protobuf_log.h"
#include "common/dtype.h"
#include "common/flags.h"
#include "common/model_config.h"
#include "common/tensor_parallel_plan.h"
#include "common/tls_credentials.h"
#include "glog/logging.h"
#include "scheduler/api/frontend.h"
#include "scheduler/api/generation_config.h"
#include "scheduler/api/http_server.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/engine/engine.h"
#include "scheduler/engine/step_plan_bound.h"
#include "scheduler/gateway.h"
#include "scheduler/metrics.h"
#include "scheduler/workers/grpc_worker_group.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "wire/worker_secret.h"
#include "wire/limits.h"

ABSL_FLAG(std::string, model, "", "Model directory (Hugging Face layout). Required.");
ABSL_FLAG(std::string, served_model_name, "", "Name reported to clients; default: --model's name.");
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to serve gRPC on.");
ABSL_FLAG(int, port, 50051, "gRPC port; 0 = the OS picks one.");
ABSL_FLAG(int, metrics_port, 0, "Prometheus /metrics port; 0 = off, -1 = the OS picks one.");
ABSL_FLAG(int, http_port, 0,
          "OpenAI-compatible HTTP port (/v1/completions, /v1/chat/completions, /v1/models, "
          "/health); 0 = off, -1 = the OS picks one.");
ABSL_FLAG(int, http_max_connections, 4096,
          "HTTP connections open at once; one more is answered 503 and closed at once.");
ABSL_FLAG(int, http_io_threads, pagoda::scheduler::HttpServerOptions().io_threads,
          "Threads answering HTTP requests and writing their streams, 1 to 64; the default "
          "suits a few cores shared with the engine.");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for /v1/chat/completions; default: the model's "
          "chat_template.jinja or tokenizer_config.json chat_template.");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda.");
ABSL_FLAG(int, tensor_parallel_size, 1, "Number of workers (tensor-parallel ranks).");
ABSL_FLAG(std::string, worker_addresses, "",
          "Comma-separated host:port of running workers, rank order; empty = spawn them.");
ABSL_FLAG(std::string, worker_secret_file, "",
          "File with the secret the --worker-addresses workers were started with "
          "(their --secret-file); required with --worker-addresses.");
ABSL_FLAG(std::string, worker_ssl_certfile, "",
          "PEM client certificate for mutual TLS with --worker-addresses workers.");
ABSL_FLAG(std::string, worker_ssl_keyfile, "",
          "PEM private key of --worker-ssl-certfile; readable by its owner only (chmod 600).");
ABSL_FLAG(std::string, worker_ssl_ca_certs, "",
          "PEM CA bundle that signed the --worker-addresses workers' certificates.");
ABSL_FLAG(std::string, worker_ssl_server_name, "",
          "With --worker-ssl-ca-certs: the name the workers' certificates must carry, checked "
          "instead of each --worker-addresses host (so one certificate serves workers on any "
          "pod IP or DNS name); empty = the host dialled.");
ABSL_FLAG(int, worker_restart_limit, 5,
          "Restart attempts of the workers within --worker-restart-window, or failed ones "
          "in a row, after which the server gives up: requests fail with UNAVAILABLE and "
          "the server exits 1 after --worker-failure-exit-delay.");
ABSL_FLAG(double, worker_restart_window, 60, "Seconds; see --worker-restart-limit.");
ABSL_FLAG(double, worker_failure_exit_delay, 5,
          "Seconds the server stays up, unhealthy and refusing requests with the reason, "
          "after its workers cannot be recovered; then it exits with code 1 so that its "
          "supervisor (Kubernetes) starts it afresh.");
ABSL_FLAG(double, worker_stall_timeout, 10,
          "Seconds a worker may leave the server's keepalive pings unanswered (stopped, "
          "swapped out, its host gone silent) before it is declared lost and restarted; a "
          "worker process that exits is seen at once.");
ABSL_FLAG(std::string, rendezvous_host, "127.0.0.1",
          "IPv4 address of this host where tensor-parallel workers meet to form their group "
          "(a small key-value store the server runs); --worker-addresses workers on other "
          "hosts must reach it.");
ABSL_FLAG(int, rendezvous_port, 0, "Port of the rendezvous store; 0 = any free port.");
ABSL_FLAG(double, collective_timeout, 30,
          "Seconds a worker waits for its tensor-parallel peers to join or to finish one "
          "all-reduce before the step fails.");
ABSL_FLAG(std::string, worker_binary, "",
          "pagoda-worker to spawn; default: the one next to this binary.");
ABSL_FLAG(int, block_size, 16, "Tokens per KV block.");
ABSL_FLAG(double, gpu_memory_utilization, 0.9,
          "Fraction of the GPU's memory the workers may fill (weights, activations, KV); "
          "memory other processes hold counts against it.");
ABSL_FLAG(bool, enforce_eager, false,
          "CUDA: run every step eagerly, without capturing decode steps as CUDA graphs.");
ABSL_FLAG(int, num_gpu_blocks_override, 0,
          "Use this many KV blocks instead of profiling; 0 = off.");
ABSL_FLAG(std::string, dtype, "auto",
          "Weight dtype: auto (the checkpoint's), float32, float16 or bfloat16.");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "KV cache dtype: auto (float32 on cpu, the compute dtype on cuda), float32, "
          "bfloat16 or float16. 2-byte dtypes hold twice the blocks in the same memory.");
ABSL_FLAG(int, cpu_threads, 0, "Threads of the CPU worker; 0 = every CPU it may use.");
ABSL_FLAG(double, cpu_kv_cache_space, 0.5, "GiB of memory for KV blocks on the cpu device.");
ABSL_FLAG(double, swap_space, 0, "GiB of CPU swap space per worker for preempted KV blocks.");
ABSL_FLAG(int, max_num_seqs, 256, "Most sequences in one step.");
ABSL_FLAG(int, max_num_batched_tokens, 0,
          "Most tokens in one step; 0 = 2048 with chunked prefill, max(max_model_len, 2048) "
          "without.");
ABSL_FLAG(bool, enable_chunked_prefill, true,
          "Split prompts into chunks that fill the token budget left by the running decodes "
          "(--no-enable-chunked-prefill: whole prompts, in steps of their own).");
ABSL_FLAG(int, max_num_partial_prefills, 1,
          "With chunked prefill: most prompts part-way through their prefill at once.");
ABSL_FLAG(int, max_long_partial_prefills, 1,
          "With chunked prefill: most prompts over --long-prefill-token-threshold part-way at "
          "once, in [1, --max-num-partial-prefills]; shorter prompts go ahead of a long one "
          "that must wait (vLLM).");
ABSL_FLAG(int, long_prefill_token_threshold, 0,
          "With chunked prefill: most prompt tokens one request gets in a step; 0 = no cap, or "
          "4% of max_model_len when --max-num-partial-prefills > 1 (vLLM).");
ABSL_FLAG(std::string, scheduling_policy, "fcfs",
          "fcfs (arrival order) or priority (the request's priority, lower first, then arrival; "
          "a waiting request preempts lower-ranked running ones when the cache is full).");
ABSL_FLAG(int, max_model_len, 0, "Longest prompt + output; 0 = the model's max positions.");
ABSL_FLAG(std::string, preemption_mode, "auto",
          "auto (recompute a group with one live sequence, swap one with several), swap or "
          "recompute.");
ABSL_FLAG(bool, enable_prefix_caching, true,
          "Reuse the KV blocks of computed prompt prefixes (--no-enable-prefix-caching: off).");
ABSL_FLAG(std::string, generation_config, "auto",
          "Sampling defaults for fields a request leaves unset, as vLLM's: auto = the model's "
          "generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty), "
          "vllm = none, or a directory holding a generation_config.json.");
ABSL_FLAG(uint64_t, seed, 0, "Seeds the seeds given to requests that bring none.");
ABSL_FLAG(int, max_queued_requests, 1024, "Waiting requests beyond which new ones are refused.");
ABSL_FLAG(double, drain_timeout, 30, "Seconds in-flight requests get to finish on SIGTERM.");
ABSL_FLAG(double, worker_start_timeout, 60, "Seconds a spawned worker gets to start listening.");
ABSL_FLAG(std::string, metrics_host, "", "Address to serve /metrics on; default: --host.");
ABSL_FLAG(std::string, ssl_certfile, "", "PEM certificate chain: serve the client API over TLS.");
ABSL_FLAG(std::string, ssl_keyfile, "",
          "PEM private key of --ssl-certfile; readable by its owner only (chmod 600).");
ABSL_FLAG(std::string, ssl_ca_certs, "",
          "PEM CA bundle: clients must present a certificate it signed (mutual TLS).");
ABSL_FLAG(std::string, tool_call_parser, "",
          "How /v1/chat/completions reads tool calls back under tool_choice auto (vLLM's "
          "names): hermes (Qwen, Hermes: <tool_call> blocks) or llama3_json (Llama 3.1 JSON); "
          "empty: auto is refused, required and named functions still work.");
ABSL_FLAG(std::string, api_key, "",
          "If set, Generation calls must carry 'authorization: Bearer <key>' (health exempt). "
          "The PAGODA_API_KEY environment variable is read when this is empty.");
ABSL_FLAG(int, max_stream_queued_messages, 1024,
          "Messages a stream may hold for a client that does not read before it is ended "
          "with RESOURCE_EXHAUSTED.");

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

absl::StatusOr<PreemptionMode> ParsePreemptionMode(const std::string& text) {
  if (text == "auto") return PreemptionMode::kAuto;
  if (text == "swap") return PreemptionMode::kSwap;
  if (text == "recompute") return PreemptionMode::kRecompute;
  return absl::InvalidArgumentError(
      absl::StrCat("--preemption-mode: expected auto, swap or recompute, got '", text, "'"));
}

absl::StatusOr<SchedulingPolicy> ParseSchedulingPolicy(const std::string& text) {
  if (text == "fcfs") return SchedulingPolicy::kFcfs;
  if (text == "priority") return SchedulingPolicy::kPriority;
  return absl::InvalidArgumentError(
      absl::StrCat("--scheduling-policy: expected fcfs or priority, got '", text, "'"));
}

// How often the main thread, waiting for a stop signal, looks whether the
// workers were given up on.
constexpr absl::Duration kGivenUpCheckPeriod = absl::Milliseconds(200);

// Waits up to `timeout` for SIGTERM or SIGINT, which main() blocked in every
// thread; returns the signal, or 0 at the timeout.
int WaitForStopSignal(absl::Duration timeout) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  const absl::Time deadline = absl::Now() + timeout;
  for (absl::Duration left = timeout; left > absl::ZeroDuration();
       left = deadline - absl::Now()) {
    const timespec wait = absl::ToTimespec(left);
    const int signal_number = sigtimedwait(&signals, nullptr, &wait);
    if (signal_number > 0) return signal_number;  // Else a timeout or EINTR.
  }
  return 0;
}

// Waits for a stop signal (returned) or for `workers` to be given up on
// (returns 0).
int WaitForStopSignalOrGivenUpWorkers(const GrpcWorkerGroup& workers) {
  while (!workers.given_up()) {
    if (const int signal_number = WaitForStopSignal(kGivenUpCheckPeriod); signal_number != 0) {
      return signal_number;
    }
  }
  return 0;
}

// Chat completions through `chat_template`, or none when it is null.
ChatRenderer ChatRendererOf(const text::ChatTemplate* chat_template) {
  if (chat_template == nullptr) return ChatRenderer();
  return [chat_template](const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                         const nlohmann::ordered_json& tools,
                         const nlohmann::ordered_json& variables) {
    return chat_template->Render(messages, add_generation_prompt, tools, variables);
  };
}

// Checks what can be checked before any worker is spawned or model loaded.
absl::Status ValidateEarly(const std::string& model_dir) {
  if (model_dir.empty()) return absl::InvalidArgumentError("--model is required");
  std::error_code error;
  if (std::filesystem::exists(model_dir, error) &&
      !std::filesystem::is_directory(model_dir, error)) {
    return absl::InvalidArgumentError(absl::StrCat("--model ", model_dir, " is not a directory"));
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: expected cpu or cuda, got '", device, "'"));
  }
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port < -1 || metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics-port: expected 0 (off), -1 (any) or 1..65535, got ", metrics_port));
  }
  if (auto dtype = ParseDTypeFlag(absl::GetFlag(FLAGS_dtype)); !dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: ", dtype.status().message()));
  }
  if (auto kv = ParseKvCacheDTypeFlag(absl::GetFlag(FLAGS_kv_cache_dtype)); !kv.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-cache-dtype: ", kv.status().message()));
  }
  if (auto parser = ParseToolCallParserName(absl::GetFlag(FLAGS_tool_call_parser)); !parser.ok()) {
    return parser.status();
  }
  if (absl::Status threads = CheckHttpIoThreads(absl::GetFlag(FLAGS_http_io_threads));
      !threads.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--http-io-threads: ", threads.message()));
  }
  return absl::OkStatus();
}

std::string ServedModelName(const std::string& model_dir) {
  std::string model_name = absl::GetFlag(FLAGS_served_model_name);
  if (!model_name.empty()) return model_name;
  model_name = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (model_name.empty()) {
    model_name = std::filesystem::path(model_dir).lexically_normal().parent_path().filename();
  }
  return model_name;
}

// What the model directory gives the server itself (the workers load the
// weights).
struct ModelFiles {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;               // Null: token ids only.
  std::unique_ptr<text::ChatTemplate> chat_template;  // Null: no chat completions.
  SamplingDefaults sampling_defaults;                 // --generation-config.
};

// The flags that shape serving, checked against the model's config.
struct ServerSettings {
  std::string model_dir;
  std::string model_name;
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  int max_model_len = 0;  // Before the workers' own limit (LoadModelOnWorkers).
  int max_num_batched_tokens = 0;
  bool enable_chunked_prefill = true;
  int max_num_partial_prefills = 1;
  int max_long_partial_prefills = 1;
  int long_prefill_token_threshold = 0;  // Resolved: 0 = no cap.
  SchedulingPolicy scheduling_policy = SchedulingPolicy::kFcfs;
  int block_size = 0;
  int world_size = 0;
  double collective_timeout = 0;
  double worker_stall_timeout = 0;
  double worker_failure_exit_delay = 0;
  int rendezvous_port = 0;
  int worker_receive_limit_bytes = 0;  // WorkerReceiveLimit.
};

// What the workers reported once the model was loaded, and the KV cache they
// were given.
struct WorkerCache {
  int max_model_len = 0;  // ServerSettings' value, cut to what the workers serve.
  int num_gpu_blocks = 0;
  int num_cpu_blocks = 0;
};

absl::StatusOr<ModelFiles> LoadModelFiles(const std::string& model_dir) {
  ModelFiles files;
  absl::StatusOr<ModelConfig> model = LoadModelConfig(model_dir);
  if (!model.ok()) return model.status();
  files.config = *std::move(model);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  files.tokenizer = *std::move(tokenizer);
  LOG(INFO) << "tokenizer: "
            << (files.tokenizer != nullptr ? absl::StrCat(files.tokenizer->kind(), ", ",
                                                          files.tokenizer->vocab_size(), " tokens")
                                           : std::string("none (token ids only)"));
  // A template outside the supported Jinja subset stops the start here.
  absl::StatusOr<std::unique_ptr<text::ChatTemplate>> chat_template =
      text::ChatTemplate::Load(model_dir, absl::GetFlag(FLAGS_chat_template));
  if (!chat_template.ok()) return chat_template.status();
  files.chat_template = *std::move(chat_template);
  LOG(INFO) << "chat template: " << (files.chat_template != nullptr ? "loaded" : "none");
  absl::StatusOr<SamplingDefaults> defaults =
      LoadSamplingDefaults(absl::GetFlag(FLAGS_generation_config), model_dir);
  if (!defaults.ok()) return defaults.status();
  files.sampling_defaults = *defaults;
  LOG(INFO) << "sampling defaults (--generation-config "
            << absl::GetFlag(FLAGS_generation_config)
            << "): " << DescribeSamplingDefaults(files.sampling_defaults);
  return files;
}

// The token budget, chunked prefill and the scheduling policy, with vLLM's
// defaults and checks. REQUIRES: settings.max_model_len resolved.
absl::Status ParseChunkingSettings(ServerSettings& settings) {
  settings.enable_chunked_prefill = absl::GetFlag(FLAGS_enable_chunked_prefill);
  settings.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  if (settings.max_num_batched_tokens < 0) {
    return absl::InvalidArgumentError("--max-num-batched-tokens must be >= 0");
  }
  if (settings.max_num_batched_tokens == 0) {
    // Without chunks a step must hold the longest prompt; with them vLLM's
    // online serving budget keeps steps short.
    settings.max_num_batched_tokens = settings.enable_chunked_prefill
                                          ? 2048
                                          : std::max(settings.max_model_len, 2048);
  }
  settings.max_num_partial_prefills = absl::GetFlag(FLAGS_max_num_partial_prefills);
  const int max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  if (settings.max_num_partial_prefills < 1 || settings.max_num_partial_prefills > max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-num-partial-prefills must be in [1, --max-num-seqs = ", max_num_seqs, "]"));
  }
  settings.max_long_partial_prefills = absl::GetFlag(FLAGS_max_long_partial_prefills);
  if (settings.max_long_partial_prefills < 1 ||
      settings.max_long_partial_prefills > settings.max_num_partial_prefills) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-long-partial-prefills must be in [1, --max-num-partial-prefills = ",
                     settings.max_num_partial_prefills, "]"));
  }
  settings.long_prefill_token_threshold = absl::GetFlag(FLAGS_long_prefill_token_threshold);
  if (settings.long_prefill_token_threshold < 0 ||
      settings.long_prefill_token_threshold > settings.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--long-prefill-token-threshold must be in [0, max_model_len = ", settings.max_model_len,
        "]"));
  }
  if (!settings.enable_chunked_prefill &&
      (settings.max_num_partial_prefills > 1 || settings.long_prefill_token_threshold > 0)) {
    return absl::InvalidArgumentError(
        "--max-num-partial-prefills > 1 and --long-prefill-token-threshold need chunked prefill");
  }
  if (settings.max_num_partial_prefills > 1 && settings.long_prefill_token_threshold == 0) {
    settings.long_prefill_token_threshold = std::max(1, settings.max_model_len * 4 / 100);
  }
  absl::StatusOr<SchedulingPolicy> policy =
      ParseSchedulingPolicy(absl::GetFlag(FLAGS_scheduling_policy));
  if (!policy.ok()) return policy.status();
  settings.scheduling_policy = *policy;
  return absl::OkStatus();
}

// The receive limit the workers need: the largest step plan this server can
// send (MaxStepPlanBytes), within the range pagoda-worker takes. A bound
// over the worker channel's ceiling is logged: a step that large would fail.
int WorkerReceiveLimit(const ServerSettings& settings, const ModelConfig& model) {
  const int64_t bound = MaxStepPlanBytes(
      {.max_num_seqs = std::max(1, absl::GetFlag(FLAGS_max_num_seqs)),
       .max_num_batched_tokens = settings.max_num_batched_tokens,
       .max_model_len = settings.max_model_len,
       .block_size = settings.block_size,
       .vocab_size = model.vocab_size,
       .num_eos_token_ids = static_cast<int>(model.eos_token_ids.size())});
  if (bound > wire::kMaxWorkerMessageBytes) {
    LOG(WARNING) << "a step plan at every limit (--max-num-seqs, --max-num-batched-tokens, "
                 << "--max-model-len, the per-request bounds) could reach " << bound
                 << " bytes, over the worker channel's " << wire::kMaxWorkerMessageBytes
                 << "; a step that large would fail";
  }
  return static_cast<int>(std::clamp<int64_t>(bound, wire::kMinWorkerReceiveLimitBytes,
                                               wire::kMaxWorkerMessageBytes));
}

// Checks the flags that need the model's config, and those of the worker
// group; every refusal comes before any worker starts.
absl::StatusOr<ServerSettings> ParseServerSettings(const std::string& model_dir,
                                                   const ModelConfig& model) {
  ServerSettings settings;
  settings.model_dir = model_dir;
  absl::StatusOr<PreemptionMode> preemption_mode =
      ParsePreemptionMode(absl::GetFlag(FLAGS_preemption_mode));
  if (!preemption_mode.ok()) return preemption_mode.status();
  settings.preemption_mode = *preemption_mode;
  settings.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  if (settings.max_model_len <= 0) settings.max_model_len = model.max_position_embeddings;
  if (settings.max_model_len > model.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-model-len ", settings.max_model_len, " exceeds the model's ",
                     "max_position_embeddings ", model.max_position_embeddings));
  }
  if (absl::Status status = ParseChunkingSettings(settings); !status.ok()) return status;
  settings.block_size = absl::GetFlag(FLAGS_block_size);
  settings.world_size = absl::GetFlag(FLAGS_tensor_parallel_size);
  if (settings.block_size <= 0 || settings.world_size <= 0) {
    return absl::InvalidArgumentError("--block-size and --tensor-parallel-size must be positive");
  }
  if (settings.world_size > wire::kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel-size ", settings.world_size,
                                                   " is over the limit of ", wire::kMaxWorldSize));
  }
  // Refused before any worker starts, in one line naming the counts.
  if (absl::Status split = CheckTensorParallelSplit(model, settings.world_size); !split.ok()) {
    return split;
  }
  settings.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  if (!(settings.collective_timeout > 0 && settings.collective_timeout <= 600)) {
    return absl::InvalidArgumentError("--collective-timeout must be in (0, 600] seconds");
  }
  settings.worker_stall_timeout = absl::GetFlag(FLAGS_worker_stall_timeout);
  if (!(settings.worker_stall_timeout >= 0.5 && settings.worker_stall_timeout <= 3600)) {
    return absl::InvalidArgumentError("--worker-stall-timeout must be in [0.5, 3600] seconds");
  }
  settings.worker_failure_exit_delay = absl::GetFlag(FLAGS_worker_failure_exit_delay);
  if (!(settings.worker_failure_exit_delay >= 0 && settings.worker_failure_exit_delay <= 600)) {
    return absl::InvalidArgumentError("--worker-failure-exit-delay must be in [0, 600] seconds");
  }
  settings.rendezvous_port = absl::GetFlag(FLAGS_rendezvous_port);
  if (settings.rendezvous_port < 0 || settings.rendezvous_port > 65535) {
    return absl::InvalidArgumentError("--rendezvous-port must be in [0, 65535]");
  }
  if (in_addr address; inet_pton(AF_INET, absl::GetFlag(FLAGS_rendezvous_host).c_str(),
                                 &address) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rendezvous-host must be an IPv4 address, got '", absl::GetFlag(FLAGS_rendezvous_host),
        "'"));
  }
  settings.model_name = ServedModelName(model_dir);
  settings.worker_receive_limit_bytes = WorkerReceiveLimit(settings, model);
  return settings;
}

// The /metrics endpoint, or null when --metrics-port is 0.
absl::StatusOr<std::unique_ptr<ServerMetrics>> StartMetrics(const std::string& model_name) {
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port == 0) return nullptr;
  const int port = metrics_port < 0 ? 0 : metrics_port;  // -1: the OS picks (tests).
  std::string metrics_host = absl::GetFlag(FLAGS_metrics_host);
  if (metrics_host.empty()) metrics_host = absl::GetFlag(FLAGS_host);
  absl::StatusOr<std::unique_ptr<ServerMetrics>> metrics =
      ServerMetrics::Start(metrics_host, port, model_name, VllmMetricNamesEnabled());
  if (!metrics.ok()) return metrics.status();
  std::cout << "PAGODA_METRICS_LISTENING " << (*metrics)->port() << std::endl;
  return metrics;
}

// The --worker-ssl-* files (TLS to --worker-addresses workers).
TlsFiles WorkerTlsFiles() {
  return TlsFiles{absl::GetFlag(FLAGS_worker_ssl_certfile), absl::GetFlag(FLAGS_worker_ssl_keyfile),
                  absl::GetFlag(FLAGS_worker_ssl_ca_certs)};
}

GrpcWorkerGroupOptions MakeWorkerGroupOptions(const ServerSettings& settings) {
  GrpcWorkerGroupOptions options;
  options.max_restarts = absl::GetFlag(FLAGS_worker_restart_limit);
  options.restart_window = absl::Seconds(absl::GetFlag(FLAGS_worker_restart_window));
  options.restart_start_timeout = absl::Seconds(absl::GetFlag(FLAGS_worker_start_timeout));
  options.rendezvous_host = absl::GetFlag(FLAGS_rendezvous_host);
  options.rendezvous_port = settings.rendezvous_port;
  options.collective_timeout = absl::Seconds(settings.collective_timeout);
  options.stall_timeout = absl::Seconds(settings.worker_stall_timeout);
  options.worker_receive_limit_bytes = settings.worker_receive_limit_bytes;
  LOG(INFO) << "largest step plan: " << settings.worker_receive_limit_bytes
            << " bytes (the workers' --max-message-bytes)";
  return options;
}

// Workers started elsewhere (--worker-addresses): they prove nothing about
// themselves but the secret and, with TLS, their certificates.
absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> ConnectWorkers(const std::string& addresses,
                                                                int world_size,
                                                                GrpcWorkerGroupOptions options) {
  std::vector<std::string> list = absl::StrSplit(addresses, ',', absl::SkipEmpty());
  if (static_cast<int>(list.size()) != world_size) {
    return absl::InvalidArgumentError(absl::StrCat("--worker-addresses has ", list.size(),
                                                   " entries for --tensor-parallel-size ",
                                                   world_size));
  }
  const std::string secret_file = absl::GetFlag(FLAGS_worker_secret_file);
  if (secret_file.empty()) {
    return absl::InvalidArgumentError("--worker-addresses needs --worker-secret-file");
  }
  absl::StatusOr<std::string> secret = ReadWorkerSecretFile(secret_file);
  if (!secret.ok()) return secret.status();
  const TlsFiles tls = WorkerTlsFiles();
  if (!tls.given() && !absl::GetFlag(FLAGS_worker_ssl_server_name).empty()) {
    return absl::InvalidArgumentError("--worker-ssl-server-name needs --worker-ssl-ca-certs");
  }
  // Without TLS the group reaches each worker as it serves (null: local
  // credentials on loopback, plaintext beyond).
  if (tls.given()) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(tls, "--worker-");
    if (!credentials.ok()) return credentials.status();
    options.connect_credentials = *credentials;
    options.tls_server_name = absl::GetFlag(FLAGS_worker_ssl_server_name);
  }
  return GrpcWorkerGroup::Connect(
      list, *secret, absl::Seconds(absl::GetFlag(FLAGS_worker_start_timeout)), options);
}

// Workers this server spawns and owns; their pids go to stdout for launchers.
absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> LaunchWorkers(
    int world_size, const GrpcWorkerGroupOptions& options) {
  std::string binary = absl::GetFlag(FLAGS_worker_binary);
  if (binary.empty()) binary = DefaultWorkerBinary();
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> workers = GrpcWorkerGroup::Launch(
      binary, world_size, absl::Seconds(absl::GetFlag(FLAGS_worker_start_timeout)), options);
  if (!workers.ok()) return workers.status();
  std::cout << "PAGODA_WORKER_PIDS " << absl::StrJoin((*workers)->worker_pids(), ",") << std::endl;
  return workers;
}

absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> StartWorkers(const ServerSettings& settings) {
  const GrpcWorkerGroupOptions options = MakeWorkerGroupOptions(settings);
  const std::string addresses = absl::GetFlag(FLAGS_worker_addresses);
  if (!addresses.empty()) return ConnectWorkers(addresses, settings.world_size, options);
  if (WorkerTlsFiles().given() || !absl::GetFlag(FLAGS_worker_ssl_server_name).empty()) {
    return absl::InvalidArgumentError(
        "--worker-ssl-* are for --worker-addresses workers; spawned workers serve a private "
        "unix socket");
  }
  return LaunchWorkers(settings.world_size, options);
}

pagoda::worker::v1::LoadModelRequest MakeLoadModelRequest(const ServerSettings& settings) {
  pagoda::worker::v1::LoadModelRequest load;
  load.set_model_dir(std::filesystem::absolute(settings.model_dir).string());
  load.set_world_size(settings.world_size);
  load.set_block_size(settings.block_size);
  load.set_device(absl::GetFlag(FLAGS_device));
  load.set_kv_cache_memory_bytes(
      static_cast<int64_t>(absl::GetFlag(FLAGS_cpu_kv_cache_space) * kGiB));
  load.set_gpu_memory_utilization(static_cast<float>(absl::GetFlag(FLAGS_gpu_memory_utilization)));
  load.set_max_num_batched_tokens(settings.max_num_batched_tokens);
  load.set_max_num_seqs(absl::GetFlag(FLAGS_max_num_seqs));
  load.set_dtype(absl::GetFlag(FLAGS_dtype));
  load.set_kv_cache_dtype(absl::GetFlag(FLAGS_kv_cache_dtype));
  load.set_cpu_threads(absl::GetFlag(FLAGS_cpu_threads));
  load.set_enforce_eager(absl::GetFlag(FLAGS_enforce_eager));
  return load;
}

// Has the workers load the model, then gives them the KV cache their
// profiling (or --num-gpu-blocks-override) and --swap-space allow.
absl::StatusOr<WorkerCache> LoadModelOnWorkers(const ServerSettings& settings,
                                               GrpcWorkerGroup& workers) {
  absl::StatusOr<pagoda::worker::v1::LoadModelResponse> loaded =
      workers.LoadModel(MakeLoadModelRequest(settings));
  if (!loaded.ok()) return loaded.status();
  WorkerCache cache;
  cache.max_model_len = settings.max_model_len;
  // A worker may serve shorter contexts than the model (CUDA: its rotary
  // table's bound): an explicit --max-model-len past that is an error, the
  // default is cut to it.
  if (const int limit = loaded->max_model_len(); limit > 0 && cache.max_model_len > limit) {
    if (absl::GetFlag(FLAGS_max_model_len) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max-model-len ", cache.max_model_len, " exceeds the ", limit,
                       " tokens the workers serve on --device ", absl::GetFlag(FLAGS_device)));
    }
    LOG(WARNING) << "max_model_len " << cache.max_model_len << " cut to the workers' " << limit;
    cache.max_model_len = limit;
  }
  if (!loaded->device_name().empty()) LOG(INFO) << "workers run on " << loaded->device_name();
  cache.num_gpu_blocks = absl::GetFlag(FLAGS_num_gpu_blocks_override);
  if (cache.num_gpu_blocks <= 0) cache.num_gpu_blocks = loaded->num_gpu_blocks();
  if (cache.num_gpu_blocks <= 0) {
    return absl::ResourceExhaustedError(
        "no KV blocks fit the memory budget; raise --cpu-kv-cache-space / "
        "--gpu-memory-utilization (on a GPU, memory other processes hold counts against it)");
  }
  cache.num_cpu_blocks =
      loaded->bytes_per_block() > 0
          ? static_cast<int>(absl::GetFlag(FLAGS_swap_space) * kGiB / loaded->bytes_per_block())
          : 0;
  pagoda::worker::v1::InitCacheRequest init;
  init.set_num_gpu_blocks(cache.num_gpu_blocks);
  init.set_num_cpu_blocks(cache.num_cpu_blocks);
  if (absl::Status status = workers.InitCache(init); !status.ok()) return status;
  LOG(INFO) << "KV cache: " << cache.num_gpu_blocks << " blocks of " << settings.block_size
            << " tokens, " << cache.num_cpu_blocks << " swap blocks";
  return cache;
}

EngineConfig MakeEngineConfig(const ServerSettings& settings, const ModelConfig& model,
                              const WorkerCache& cache) {
  EngineConfig config;
  config.scheduler.block_size = settings.block_size;
  config.scheduler.num_gpu_blocks = cache.num_gpu_blocks;
  config.scheduler.num_cpu_blocks = cache.num_cpu_blocks;
  config.scheduler.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  config.scheduler.max_num_batched_tokens = settings.max_num_batched_tokens;
  config.scheduler.max_model_len = cache.max_model_len;
  config.scheduler.preemption_mode = settings.preemption_mode;
  config.scheduler.enable_chunked_prefill = settings.enable_chunked_prefill;
  config.scheduler.max_num_partial_prefills = settings.max_num_partial_prefills;
  config.scheduler.long_prefill_token_threshold = settings.long_prefill_token_threshold;
  config.scheduler.max_long_partial_prefills = settings.max_long_partial_prefills;
  config.scheduler.policy = settings.scheduling_policy;
  config.scheduler.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  config.eos_token_ids.assign(model.eos_token_ids.begin(), model.eos_token_ids.end());
  config.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  return config;
}

// The tokens' bytes for structured outputs, built once; null (constraints
// refused) for a model without a tokenizer or one that cannot list them.
// Tokens past the model's vocabulary can never be drawn and are left out.
std::shared_ptr<const constraints::TokenVocabulary> MakeTokenVocabulary(const ModelFiles& model) {
  if (model.tokenizer == nullptr) return nullptr;
  absl::StatusOr<std::vector<std::optional<std::string>>> bytes = model.tokenizer->TokenBytes();
  if (bytes.ok() && static_cast<int>(bytes->size()) > model.config.vocab_size) {
    bytes->resize(model.config.vocab_size);
  }
  absl::StatusOr<std::shared_ptr<const constraints::TokenVocabulary>> vocabulary =
      bytes.ok() ? constraints::TokenVocabulary::Create(*std::move(bytes), model.config.vocab_size)
                 : absl::StatusOr<std::shared_ptr<const constraints::TokenVocabulary>>(bytes.status());
  if (!vocabulary.ok()) {
    LOG(WARNING) << "structured outputs off: " << vocabulary.status();
    return nullptr;
  }
  LOG(INFO) << "structured outputs: " << (*vocabulary)->size() << " tokens with bytes";
  return *std::move(vocabulary);
}

ModelLimits MakeModelLimits(const ModelFiles& model, int max_model_len) {
  ModelLimits limits;
  limits.vocab_size = model.config.vocab_size;
  limits.max_model_len = max_model_len;
  limits.bos_token_id = model.config.bos_token_id;
  limits.defaults = model.sampling_defaults;
  limits.token_vocabulary = MakeTokenVocabulary(model);
  // A tokenizer.json knows whether its model starts prompts with BOS (Qwen's
  // config.json names one that its tokenizer never adds).
  if (model.tokenizer != nullptr && model.tokenizer->bos_token_to_add().has_value()) {
    limits.bos_token_id = *model.tokenizer->bos_token_to_add();
  }
  return limits;
}

ServedModelInfo MakeServedModelInfo(const ServerSettings& settings, const ModelFiles& model,
                                    const EngineConfig& engine_config) {
  ServedModelInfo info;
  info.model_name = settings.model_name;
  info.vocab_size = model.config.vocab_size;
  info.max_model_len = engine_config.scheduler.max_model_len;
  info.block_size = settings.block_size;
  info.tensor_parallel_size = settings.world_size;
  info.device = absl::GetFlag(FLAGS_device);
  info.eos_token_ids = engine_config.eos_token_ids;
  info.sampling_defaults = model.sampling_defaults;
  return info;
}

// Text requests waiting for a tokenizer thread: as many as may wait in the
// engine's queue, so that the tokenizer pool never refuses (429) a request
// the queue would still take; a burst of text prompts (vLLM's benchmark
// client at 700 concurrent) found the old fixed 256 full with the queue far
// from its limit.
int MaxPendingTokenizations() { return std::max(1, absl::GetFlag(FLAGS_max_queued_requests)); }

// --api-key (else PAGODA_API_KEY) and the stream bound, checked by the caller.
GenerationOptions ReadGenerationOptions() {
  GenerationOptions options;
  options.api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* key = std::getenv("PAGODA_API_KEY"); options.api_key.empty() && key != nullptr) {
    options.api_key = key;
  }
  options.max_stream_queued_messages = absl::GetFlag(FLAGS_max_stream_queued_messages);
  options.max_pending_tokenizations = MaxPendingTokenizations();
  return options;
}

absl::StatusOr<std::unique_ptr<FrontendServer>> StartGrpcFrontend(
    const ModelLimits& limits, GenerationService* service, VllmEngineService* vllm_service,
    ServerMetrics* metrics, Engine* engine) {
  FrontendOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.max_request_bytes = MaxRequestBytes(limits);
  options.ssl_certfile = absl::GetFlag(FLAGS_ssl_certfile);
  options.ssl_keyfile = absl::GetFlag(FLAGS_ssl_keyfile);
  options.ssl_ca_certs = absl::GetFlag(FLAGS_ssl_ca_certs);
  if (vllm_service != nullptr) options.extra_services.push_back(vllm_service);
  if (metrics != nullptr) options.metrics_registry = metrics->registry();
  return FrontendServer::Start(options, service, engine);
}

// The OpenAI-compatible endpoint, or null when --http-port is 0.
absl::StatusOr<std::unique_ptr<HttpServer>> StartHttpFrontend(
    const ServerSettings& settings, const ModelFiles& model, int max_model_len,
    const std::string& api_key, ServerMetrics* metrics, Engine* engine,
    RequestValidator* validator) {
  const int http_port = absl::GetFlag(FLAGS_http_port);
  if (http_port == 0) return nullptr;
  HttpServerOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = http_port < 0 ? 0 : http_port;  // -1: the OS picks (tests).
  options.model_name = settings.model_name;
  options.max_model_len = max_model_len;
  options.api_key = api_key;
  options.tool_call_parser = absl::GetFlag(FLAGS_tool_call_parser);
  options.max_connections = absl::GetFlag(FLAGS_http_max_connections);
  options.io_threads = absl::GetFlag(FLAGS_http_io_threads);
  options.max_pending_tokenizations = MaxPendingTokenizations();
  if (metrics != nullptr) options.metrics_registry = metrics->registry();
  absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(
      options, engine, validator, model.tokenizer.get(), ChatRendererOf(model.chat_template.get()));
  if (!http.ok()) return http.status();
  std::cout << "PAGODA_HTTP_LISTENING " << (*http)->port() << std::endl;
  return http;
}

// After SIGTERM/SIGINT: refuse new requests, give those in flight up to
// --drain-timeout, then stop the engine, the frontends and the workers, in
// that order (each still serves the one before it).
void DrainAndStop(const std::string& why, Engine& engine, GenerationService& service,
                  FrontendServer& server, HttpServer* http, GrpcWorkerGroup& workers) {
  const absl::Duration drain_timeout = absl::Seconds(absl::GetFlag(FLAGS_drain_timeout));
  LOG(INFO) << why << ": draining (up to " << drain_timeout << ")";
  engine.StopAccepting();
  server.SetDraining();
  if (http != nullptr) http->SetDraining();
  const absl::Time drain_deadline = absl::Now() + drain_timeout;
  if (!engine.WaitUntilIdle(drain_timeout) ||
      !service.WaitForCallsToFinish(drain_deadline - absl::Now())) {
    LOG(WARNING) << "drain timeout: failing the requests still in flight";
  }
  engine.Stop();  // Fails whatever is left with UNAVAILABLE.
  LOG(INFO) << "engine stopped; closing the gRPC server";
  // Every Generate call has ended by now; what remains are idle client
  // connections, which gRPC would otherwise wait on until the deadline.
  server.Shutdown(absl::Milliseconds(500));
  if (http != nullptr) http->Shutdown();
  LOG(INFO) << "gRPC server closed; stopping the workers";
  workers.Shutdown();
  LOG(INFO) << "stopped";
}

// After the workers were given up on (every request already failed, health
// NOT_SERVING): stays up `delay_seconds`, or until a stop signal, so that
// clients and probes learn why rather than meet a closed port, then returns
// the error that makes the server exit 1 and its supervisor start it afresh.
absl::Status LingerAfterGivingUp(double delay_seconds, const GrpcWorkerGroup& workers) {
  const absl::Status ended = absl::UnavailableError(
      absl::StrCat("exiting because the workers cannot be recovered: ", workers.failure()));
  const absl::Duration delay = absl::Seconds(delay_seconds);
  LOG(ERROR) << ended.message() << " (exit in " << delay << ")";
  WaitForStopSignal(delay);
  return ended;
}

// Runs the engine and the frontends until a stop signal, then drains and
// returns OK; or until the workers are given up on, then returns why.
absl::Status ServeUntilStopSignal(const ServerSettings& settings, const ModelFiles& model,
                                  const WorkerCache& cache, ServerMetrics* metrics,
                                  KvEventPublisher* kv_events, GrpcWorkerGroup& workers) {
  const EngineConfig engine_config = MakeEngineConfig(settings, model.config, cache);
  Engine engine(engine_config, &workers, metrics);
  // Destroyed before `engine`.
  std::unique_ptr<KvEventsAttachment> kv_events_page = AttachKvEvents(engine, kv_events, metrics);
  // Scrapes read the engine's live state, so gauges fall back when idle.
  if (metrics != nullptr) metrics->SetSnapshotSource([&engine] { return engine.snapshot(); });
  absl::Cleanup detach_metrics = [metrics] {  // Runs before `engine` is destroyed.
    if (metrics != nullptr) metrics->SetSnapshotSource(nullptr);
  };
  engine.Start();
  // A frontend that cannot start ends the server before it ever listened.
  auto stop_backend = [&engine, &workers] {
    engine.Stop();
    workers.Shutdown();
  };

  const ModelLimits limits = MakeModelLimits(model, cache.max_model_len);
  RequestValidator validator(limits, model.tokenizer.get(), absl::GetFlag(FLAGS_seed));
  const GenerationOptions generation_options = ReadGenerationOptions();
  if (generation_options.max_stream_queued_messages < 1) {
    stop_backend();
    return absl::InvalidArgumentError("--max-stream-queued-messages must be at least 1");
  }
  const ServedModelInfo served = MakeServedModelInfo(settings, model, engine_config);
  GenerationService service(served, &engine, &validator, model.tokenizer.get(),
                            generation_options);
  std::unique_ptr<VllmEngineService> vllm_service = MakeVllmEngineService(
      served, &engine, &validator, model.tokenizer.get(), generation_options);
  absl::StatusOr<std::unique_ptr<FrontendServer>> server =
      StartGrpcFrontend(limits, &service, vllm_service.get(), metrics, &engine);
  if (!server.ok()) {
    stop_backend();
    return server.status();
  }
  absl::StatusOr<std::unique_ptr<HttpServer>> http = StartHttpFrontend(
      settings, model, cache.max_model_len, generation_options.api_key, metrics, &engine,
      &validator);
  if (!http.ok()) {
    stop_backend();
    return http.status();
  }
  std::cout << "PAGODA_SERVER_LISTENING " << (*server)->port() << std::endl;
  LOG(INFO) << "serving " << settings.model_name << " on " << absl::GetFlag(FLAGS_host) << ":"
            << (*server)->port();

  const int signal_number = WaitForStopSignalOrGivenUpWorkers(workers);
  const absl::Status ended = signal_number != 0
                                 ? absl::OkStatus()
                                 : LingerAfterGivingUp(settings.worker_failure_exit_delay, workers);
  DrainAndStop(signal_number != 0 ? absl::StrCat("signal ", signal_number) : "workers given up",
               engine, service, **server, http->get(), workers);
  // Its calls ended with the server's shutdown.
  if (vllm_service != nullptr) vllm_service->WaitForCallsToFinish(absl::Seconds(1));
  return ended;
}

// Start-up in the order that refuses bad input cheapest first: flags, the
// model's files, the flags that depend on them, metrics (a busy port is
// found before any worker starts), the workers and their KV cache, then
// serving until a stop signal (or until the workers are given up on).
absl::Status Serve() {
  const std::string model_dir = absl::GetFlag(FLAGS_model);
  if (absl::Status status = ValidateEarly(model_dir); !status.ok()) return status;
  absl::StatusOr<ModelFiles> model = LoadModelFiles(model_dir);
  if (!model.ok()) return model.status();
  absl::StatusOr<ServerSettings> settings = ParseServerSettings(model_dir, model->config);
  if (!settings.ok()) return settings.status();
  absl::StatusOr<std::unique_ptr<ServerMetrics>> metrics = StartMetrics(settings->model_name);
  if (!metrics.ok()) return metrics.status();
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> kv_events = StartKvEventPublisher(
      settings->model_name, absl::GetFlag(FLAGS_enable_prefix_caching));
  if (!kv_events.ok()) return kv_events.status();
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> workers = StartWorkers(*settings);
  if (!workers.ok()) return workers.status();
  absl::StatusOr<WorkerCache> cache = LoadModelOnWorkers(*settings, **workers);
  if (!cache.ok()) return cache.status();
  if (*metrics != nullptr) {
    (*metrics)->SetCacheConfig(settings->block_size, cache->num_gpu_blocks, cache->num_cpu_blocks,
                               absl::GetFlag(FLAGS_enable_prefix_caching));
  }
  return ServeUntilStopSignal(*settings, *model, *cache, metrics->get(), kv_events->get(),
                              **workers);
}

}  // namespace
}  // namespace pagoda::scheduler

int main(int argc, char** argv) {
  pagoda::scheduler::AcceptGatewayFlagSpellings(argc, argv);
  // vLLM's spelling of the negated flag; Abseil negates with a bare "no".
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-enable-prefix-caching") == 0) {
      argv[i] = const_cast<char*>("--noenable_prefix_caching");
    }
    if (std::strcmp(argv[i], "--no-enable-chunked-prefill") == 0) {
      argv[i] = const_cast<char*>("--noenable_chunked_prefill");
    }
  }
  pagoda::ParsePagodaCommandLine(
      argc, argv,
      {"pagoda-server", "pagoda-server --model DIR [flags]: serves pagoda.v1.Generation"});
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  pagoda::LimitProtobufLogging();
  // Every thread inherits this mask, so only the waiting thread sees the
  // signals and drain runs in ordinary code, not in a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::Status status = pagoda::scheduler::Serve();
  if (!status.ok()) {
    std::cerr << "pagoda-server: " << status.message() << std::endl;
    return 1;
  }
  return 0;
}
