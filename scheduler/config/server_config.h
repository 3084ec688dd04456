#ifndef PAGODA_SCHEDULER_CONFIG_SERVER_CONFIG_H_
#define PAGODA_SCHEDULER_CONFIG_SERVER_CONFIG_H_

// pagoda-server's configuration, as vLLM's VllmConfig: built once from the
// command line (server_flags.h), every range and cross-flag rule checked
// here before any worker starts, then read by the start-up sequence and
// everything it builds. Nothing else reads a flag.
//
// Two checks, cheapest first: CheckServerConfig needs the flags alone;
// ResolveForModel needs the model's config.json and fills in the values
// whose defaults depend on it (max_model_len, the token budget). Both return
// INVALID_ARGUMENT with one line naming the flag, the value and what is
// allowed.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/model_config.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/lora/lora_options.h"
#include "scheduler/spec/speculative_config.h"

namespace pagoda::scheduler {

// What model is served and how it reads.
struct ModelOptions {
  std::string model_dir;
  // Space-separated names (ServedModelNames); "": the directory's name.
  std::string served_model_name;
  std::string dtype = "auto";
  std::string kv_cache_dtype = "auto";
  // vLLM's --quantization; "" or "auto": the checkpoint's own (the worker
  // checks a named method against the checkpoint at load).
  std::string quantization;
  // CPU workers' weight-only Linears: "int8" inputs or "float32"
  // (common/quantization_methods.h).
  std::string cpu_weight_only_activations = "int8";
  std::string chat_template;  // File; "": the model's own.
  // vLLM's --chat-template-content-format: auto, string or openai (checked
  // with the template, text/chat_content_format.h).
  std::string chat_template_content_format = "auto";
  std::string generation_config = "auto";
  // vLLM's --override-generation-config: a JSON object laid over the
  // defaults --generation-config gives (LoadSamplingDefaults); "": none.
  std::string override_generation_config;
  std::string tool_call_parser;
  // vLLM's --enable-auto-tool-choice: here auto is served whenever a parser
  // is named; the flag only makes a missing parser an error at start.
  bool enable_auto_tool_choice = false;
  // vLLM's --reasoning-parser: "" or "deepseek_r1" (scheduler/api/reasoning.h).
  std::string reasoning_parser;
  int max_logprobs = 20;  // vLLM's --max-logprobs (ModelLimits.max_logprobs).
  int max_model_len = 0;  // 0 until resolved: the model's max positions.
  // Set by ResolveForModel: --max-model-len was given (a worker's shorter
  // limit then refuses it, where it cuts a default).
  bool max_model_len_given = false;
};

// The client-facing ports: gRPC, OpenAI HTTP, metrics.
struct FrontDoorOptions {
  std::string host = "127.0.0.1";
  int port = 50051;          // 0: the OS picks.
  int http_port = 0;         // 0: off; -1: the OS picks.
  int metrics_port = 0;      // 0: off; -1: the OS picks.
  std::string metrics_host;  // "": host.
  int http_max_connections = 4096;
  int http_io_threads = 2;
  std::string api_key;  // --api-key, else PAGODA_API_KEY.
  std::string ssl_certfile;
  std::string ssl_keyfile;
  std::string ssl_ca_certs;
  int max_stream_queued_messages = 1024;
  bool vllm_metric_names = true;
  bool vllm_grpc_api = true;
  double drain_timeout = 30;
  // The periodic stats line (scheduler/stats_log.h): off with
  // --disable-log-stats; every VLLM_LOG_STATS_INTERVAL seconds (vLLM's
  // environment variable; NaN when it is not a number).
  bool log_stats = true;
  double log_stats_interval = 10;
  // vLLM's request log (scheduler/api/request_log.h): --enable-log-requests,
  // with the prompt at VLLM_LOGGING_LEVEL=DEBUG; --enable-log-outputs (needs
  // the first); --max-log-len (-1: uncut).
  // vLLM's usage flags for the OpenAI door (HttpServerOptions).
  bool enable_prompt_tokens_details = false;
  bool enable_force_include_usage = false;
  bool enable_server_load_tracking = false;  // GET /load (HttpServerOptions).
  bool return_tokens_as_token_ids = false;
  std::string response_role = "assistant";  // vLLM's --response-role.
  bool log_requests = false;
  bool log_request_details = false;
  bool log_outputs = false;
  int max_log_len = -1;
};

// The scheduler's budgets and policies.
struct SchedulingOptions {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 0;  // 0 until resolved.
  bool enable_chunked_prefill = true;
  int max_num_partial_prefills = 1;
  int max_long_partial_prefills = 1;
  int long_prefill_token_threshold = 0;  // Resolved: 0 = no cap.
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  PreemptionMode preemption_mode = PreemptionMode::kAuto;
  bool enable_prefix_caching = true;
  int max_queued_requests = 1024;
  uint64_t seed = 0;
  // Overlapped scheduling (scheduler/engine/step_pipeline.h). The engine
  // runs without it whenever drafts are proposed (a step with drafts returns
  // a run of tokens of unknown length, so the next step has no single slot
  // to fill).
  bool async_scheduling = true;
};

// The KV cache's geometry and memory.
struct CacheOptions {
  int block_size = 16;
  double gpu_memory_utilization = 0.9;
  int num_gpu_blocks_override = 0;
  double cpu_kv_cache_space_gib = 0.5;
  double swap_space_gib = 0;
};

// The workers: where they run, how they are started, watched and restarted.
struct WorkerOptions {
  std::string device = "cpu";
  int tensor_parallel_size = 1;
  std::vector<std::string> addresses;  // Empty: spawn them.
  std::string secret_file;
  std::string ssl_certfile;
  std::string ssl_keyfile;
  std::string ssl_ca_certs;
  std::string ssl_server_name;
  std::string binary;  // "": the one beside pagoda-server.
  int cpu_threads = 0;
  bool enforce_eager = false;
  int restart_limit = 5;
  double restart_window = 60;
  double failure_exit_delay = 5;
  double stall_timeout = 10;
  double start_timeout = 60;
  double collective_timeout = 30;
  std::string rendezvous_host = "127.0.0.1";
  int rendezvous_port = 0;
};

// The most KV event batches any of KvEventOptions' bounds may name.
inline constexpr int kMaxKvEventBatches = 1 << 20;

// KV cache events for prefix-aware routers: set by the --kv-events-* flags
// or by vLLM's --kv-events-config (kv_events_config.h).
struct KvEventOptions {
  std::string endpoint;  // "": off.
  std::string replay_endpoint;
  std::string topic;  // "": kv@<pod>@<served model name>.
  int queue_batches = 1024;
  int replay_buffer = 10000;
  int send_high_water_mark = 100000;  // ZeroMQ's, in messages.
};

// vLLM flags that vLLM command lines carry and that change nothing here,
// taken so that such a command line runs: each value whose behaviour Pagoda
// has is accepted (and logged at start), any other refused.
struct VllmNoOpFlags {
  bool trust_remote_code = false;            // Pagoda runs no code a model ships.
  bool disable_custom_all_reduce = false;    // Tensor parallelism all-reduces with NCCL.
  std::string load_format = "auto";          // auto or safetensors: what Pagoda reads.
  std::string distributed_executor_backend;  // "" or mp: the workers are processes.
  bool disable_uvicorn_access_log = false;   // Pagoda keeps no access log.
  bool disable_fastapi_docs = false;         // Pagoda serves no API docs pages.
  std::string uvicorn_log_level = "info";    // vLLM's choices; Pagoda has no uvicorn.
};

// The start-up log's line naming the no-op flags given ("" for none).
std::string DescribeVllmNoOpFlags(const VllmNoOpFlags& flags);

struct ServerConfig {
  ModelOptions model;
  FrontDoorOptions front_door;
  SchedulingOptions scheduling;
  CacheOptions cache;
  WorkerOptions workers;
  KvEventOptions kv_events;
  // --speculative-config, parsed (ParseSpeculativeConfig); unset: off.
  std::optional<SpeculativeConfig> speculative;
  // LoRA adapters (docs/lora.md): the workers get max_loras slots of
  // max_lora_rank with enable_lora, none without.
  lora::LoraOptions lora;
  // vLLM's --config FILE.yaml, already read into the flags above (logged).
  std::string config_file;
  VllmNoOpFlags vllm_no_ops;
};

// Every rule that needs the flags alone.
absl::Status CheckServerConfig(const ServerConfig& config);

// The rules that need the model (max_model_len against its positions, the
// tensor-parallel split of its heads) and the defaults that depend on it.
// REQUIRES: CheckServerConfig(*config) is OK.
absl::Status ResolveForModel(const ModelConfig& model, ServerConfig* config);

// --served-model-name, else the model directory's name.
std::string ServedModelName(const ModelOptions& model);

// Every name the model is served under, as vLLM's --served-model-name A B:
// the flag's words (the first, ServedModelName, is the one reported in
// responses and metrics; requests may name any), or the directory's name.
std::vector<std::string> ServedModelNames(const ModelOptions& model);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_CONFIG_SERVER_CONFIG_H_
