// pagoda-server's command line: every flag it takes, defined here and read
// here once, into a ServerConfig (server_config.h). The defaults are the
// config structs' own where they have one, so a flag and its field cannot
// disagree.

#include "scheduler/config/server_flags.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "scheduler/config/kv_events_config.h"

// Model.
ABSL_FLAG(std::string, config, "",
          "vLLM's config file, FILE.yaml: a mapping of flag names to values (port: 8000, "
          "enable-lora: true, lora-modules: [a=/x], speculative-config: {method: ngram}), read "
          "as flags given before the command line's own, which win. Empty: none.");
ABSL_FLAG(std::string, model, "", "Model directory (Hugging Face layout). Required.");
ABSL_FLAG(std::string, served_model_name, "",
          "Name reported to clients; default: --model's name. Several words (vLLM's "
          "--served-model-name A B): requests may name any, responses report the first.");
ABSL_FLAG(std::string, dtype, "auto",
          "Weight dtype: auto (the checkpoint's), float32, float16 or bfloat16.");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "KV cache dtype: auto (float32 on cpu, the compute dtype on cuda), float32, "
          "bfloat16, float16, fp8 / fp8_e4m3 or fp8_e5m2 (fp8: cpu only). 2-byte dtypes hold "
          "twice the blocks of float32 in the same memory, fp8 four times.");
ABSL_FLAG(std::string, quantization, "",
          "vLLM's --quantization: empty or auto serves the checkpoint's quantization_config; "
          "awq, awq_marlin, gptq, gptq_marlin or compressed-tensors must match it.");
ABSL_FLAG(std::string, cpu_weight_only_activations, "int8",
          "CPU: how the weight-only int4/int8 linears (AWQ, GPTQ, compressed-tensors W4A16/W8A16) "
          "take their inputs: int8 quantizes each token's inputs per weight group and sums "
          "integer products (faster decode: about 1.2x at batch 1, 2x at batch 8; W4A8 "
          "numerics); float32 keeps float inputs (the checkpoint's exact weight-only numerics).");
ABSL_FLAG(int, max_model_len, 0, "Longest prompt + output; 0 = the model's max positions.");
ABSL_FLAG(std::string, chat_template, "",
          "Jinja chat template file for /v1/chat/completions; default: the model's "
          "chat_template.jinja or tokenizer_config.json chat_template.");
ABSL_FLAG(std::string, chat_template_content_format, "auto",
          "vLLM's: a message's content as the template sees it: string (text, parts one per "
          "line), openai (a list of text parts) or auto (openai when the template loops over it).");
ABSL_FLAG(std::string, generation_config, "auto",
          "Sampling defaults for fields a request leaves unset, as vLLM's: auto = the model's "
          "generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty, "
          "max_new_tokens as the default max_tokens), vllm = none, or a directory holding a "
          "generation_config.json (whose max_new_tokens also caps every request's max_tokens).");
ABSL_FLAG(std::string, override_generation_config, "",
          "vLLM's JSON object over --generation-config's sampling defaults, e.g. "
          "{\"temperature\": 0.5}: temperature, top_k, top_p, min_p, repetition_penalty and "
          "max_new_tokens (the default max_tokens and every request's cap) (null removes one; "
          "other keys are not read); also key by key, "
          "--override-generation-config.temperature 0.5. Empty = none.");
ABSL_FLAG(std::string, tool_call_parser, "",
          "How /v1/chat/completions reads tool calls back under tool_choice auto (vLLM's "
          "names): hermes (Qwen, Hermes: <tool_call> blocks) or llama3_json (Llama 3.1 JSON); "
          "empty: auto is refused, required and named functions still work.");
ABSL_FLAG(int, max_logprobs, 20,
          "vLLM's: most logprobs per token a request may ask (logprobs, top_logprobs, "
          "prompt_logprobs), 0 to 20 (this server's most; vLLM's -1 is refused).");
ABSL_FLAG(std::string, reasoning_parser, "",
          "vLLM's: deepseek_r1 (DeepSeek R1, its distills, QwQ) splits chat answers at </think> "
          "into \"reasoning\" and content; empty: none.");
ABSL_FLAG(bool, enable_auto_tool_choice, false,
          "vLLM's switch for tool_choice auto, taken so vLLM's command lines run: auto is "
          "served whenever --tool-call-parser names a parser (vLLM needs both), and with this "
          "flag a missing --tool-call-parser is refused at start, as vLLM refuses it.");

// Front doors: gRPC, OpenAI HTTP, metrics.
ABSL_FLAG(std::string, host, "127.0.0.1", "Address to serve gRPC on.");
ABSL_FLAG(int, port, 50051, "gRPC port; 0 = the OS picks one.");
ABSL_FLAG(int, http_port, 0,
          "OpenAI-compatible HTTP port (/v1/completions, /v1/chat/completions, /v1/models, "
          "/health); 0 = off, -1 = the OS picks one.");
ABSL_FLAG(int, http_max_connections, 4096,
          "HTTP connections open at once; one more is answered 503 and closed at once.");
ABSL_FLAG(int, http_io_threads, pagoda::scheduler::FrontDoorOptions().http_io_threads,
          "Threads answering HTTP requests and writing their streams, 1 to 64; the default "
          "suits a few cores shared with the engine.");
ABSL_FLAG(int, metrics_port, 0, "Prometheus /metrics port; 0 = off, -1 = the OS picks one.");
ABSL_FLAG(std::string, metrics_host, "", "Address to serve /metrics on; default: --host.");
ABSL_FLAG(std::string, api_key, "",
          "If set, Generation calls must carry 'authorization: Bearer <key>' (health exempt). "
          "The PAGODA_API_KEY environment variable is read when this is empty.");
ABSL_FLAG(std::string, ssl_certfile, "", "PEM certificate chain: serve the client API over TLS.");
ABSL_FLAG(std::string, ssl_keyfile, "",
          "PEM private key of --ssl-certfile; readable by its owner only (chmod 600).");
ABSL_FLAG(std::string, ssl_ca_certs, "",
          "PEM CA bundle: clients must present a certificate it signed (mutual TLS).");
ABSL_FLAG(int, max_stream_queued_messages, 1024,
          "Messages a stream may hold for a client that does not read before it is ended "
          "with RESOURCE_EXHAUSTED.");
ABSL_FLAG(bool, vllm_metric_names, true,
          "Also export the gauges and counters that vLLM's consumers read under vLLM's names "
          "(vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...); "
          "--no-vllm-metric-names: pagoda_* names only.");
ABSL_FLAG(bool, vllm_grpc_api, true,
          "Also serve vLLM's engine gRPC API (vllm.grpc.engine.VllmEngine) on the gRPC port; "
          "--no-vllm-grpc-api: pagoda.v1 only.");
ABSL_FLAG(double, drain_timeout, 30, "Seconds in-flight requests get to finish on SIGTERM.");
ABSL_FLAG(bool, disable_log_stats, false,
          "vLLM's: no periodic stats line in the log (otherwise every VLLM_LOG_STATS_INTERVAL "
          "seconds, 10 by default: throughput, running and waiting requests, KV cache usage, "
          "prefix cache hit rate, speculative acceptance).");
ABSL_FLAG(bool, enable_prompt_tokens_details, false,
          "vLLM's: OpenAI usage carries prompt_tokens_details.cached_tokens, the prompt "
          "tokens the prefix cache held.");
ABSL_FLAG(bool, enable_force_include_usage, false,
          "vLLM's: every OpenAI stream reports usage, in each chunk and a last usage chunk, "
          "whatever its stream_options.");
ABSL_FLAG(bool, enable_server_load_tracking, false,
          "vLLM's: GET /load answers {\"server_load\": N}, the completions and chat requests "
          "in flight (0 without this flag).");
ABSL_FLAG(bool, return_tokens_as_token_ids, false,
          "vLLM's: OpenAI logprobs name each token \"token_id:N\" instead of its text, unless "
          "a request's return_tokens_as_token_ids says otherwise.");
ABSL_FLAG(std::string, response_role, "assistant",
          "vLLM's: the role of chat answers when the request adds the generation prompt (else the "
          "last message's role); 1 to 64 printable ASCII characters.");
ABSL_FLAG(bool, enable_log_requests, false,
          "vLLM's: log each request's id, sampling options and adapter as it is accepted "
          "(and its prompt with VLLM_LOGGING_LEVEL=DEBUG). Off: prompts are the users' data.");
ABSL_FLAG(bool, enable_log_outputs, false,
          "vLLM's: log each sequence's whole output text and finish reason as it ends. Needs "
          "--enable-log-requests.");
ABSL_FLAG(int, max_log_len, -1,
          "vLLM's: the most prompt token ids, prompt characters and output characters a "
          "request log line shows; -1: all.");

// Scheduling.
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
ABSL_FLAG(std::string, preemption_mode, "auto",
          "auto (recompute a group with one live sequence, swap one with several), swap or "
          "recompute.");
ABSL_FLAG(bool, enable_prefix_caching, true,
          "Reuse the KV blocks of computed prompt prefixes (--no-enable-prefix-caching: off).");
ABSL_FLAG(int, max_queued_requests, 1024, "Waiting requests beyond which new ones are refused.");
ABSL_FLAG(bool, async_scheduling, true,
          "Overlapped scheduling (vLLM's --async-scheduling, on by default here): the server "
          "plans and sends step N + 1 while the workers run step N, and processes N's tokens "
          "meanwhile (--no-async-scheduling: one step at a time, for debugging and comparison). "
          "Off whenever speculative decoding is on.");
ABSL_FLAG(uint64_t, seed, 0, "Seeds the seeds given to requests that bring none.");

// KV cache.
ABSL_FLAG(int, block_size, 16, "Tokens per KV block.");
ABSL_FLAG(double, gpu_memory_utilization, 0.9,
          "Fraction of the GPU's memory the workers may fill (weights, activations, KV); "
          "memory other processes hold counts against it.");
ABSL_FLAG(int, num_gpu_blocks_override, 0,
          "Use this many KV blocks instead of profiling; 0 = off.");
ABSL_FLAG(double, cpu_kv_cache_space, 0.5, "GiB of memory for KV blocks on the cpu device.");
ABSL_FLAG(double, swap_space, 0, "GiB of CPU swap space per worker for preempted KV blocks.");

// Workers.
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
ABSL_FLAG(std::string, worker_binary, "",
          "pagoda-worker to spawn; default: the one next to this binary.");
ABSL_FLAG(int, cpu_threads, 0, "Threads of the CPU worker; 0 = every CPU it may use.");
ABSL_FLAG(bool, enforce_eager, false,
          "CUDA: run every step eagerly, without capturing decode steps as CUDA graphs.");
// vLLM's flags with no effect here (VllmNoOpFlags).
ABSL_FLAG(bool, trust_remote_code, false,
          "vLLM's; no effect: Pagoda runs no code a model directory ships.");
ABSL_FLAG(bool, disable_custom_all_reduce, false,
          "vLLM's; no effect: tensor parallelism all-reduces with NCCL (or on the CPU).");
ABSL_FLAG(std::string, load_format, "auto",
          "vLLM's: auto or safetensors, the weights Pagoda reads; others are refused.");
ABSL_FLAG(std::string, distributed_executor_backend, "",
          "vLLM's: mp (the workers are processes, as always here); others are refused.");
ABSL_FLAG(bool, disable_uvicorn_access_log, false,
          "vLLM's; no effect: Pagoda logs no line per HTTP request.");
ABSL_FLAG(bool, disable_fastapi_docs, false,
          "vLLM's; no effect: Pagoda serves no /docs, /redoc or /openapi.json.");
ABSL_FLAG(std::string, uvicorn_log_level, "info",
          "vLLM's: debug, info, warning, error, critical or trace; no effect (no uvicorn here).");
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
ABSL_FLAG(double, worker_start_timeout, 60, "Seconds a spawned worker gets to start listening.");
ABSL_FLAG(double, collective_timeout, 30,
          "Seconds a worker waits for its tensor-parallel peers to join or to finish one "
          "all-reduce before the step fails.");
ABSL_FLAG(std::string, rendezvous_host, "127.0.0.1",
          "IPv4 address of this host where tensor-parallel workers meet to form their group "
          "(a small key-value store the server runs); --worker-addresses workers on other "
          "hosts must reach it.");
ABSL_FLAG(int, rendezvous_port, 0, "Port of the rendezvous store; 0 = any free port.");

// KV events.
ABSL_FLAG(std::string, kv_events_endpoint, "",
          "Publish the prefix cache's KV events (BlockStored, BlockRemoved, AllBlocksCleared) "
          "on a ZeroMQ PUB socket in vLLM's msgpack layout: tcp://*:PORT binds, "
          "tcp://HOST:PORT connects (vLLM's rule); empty = off. Needs prefix caching.");
ABSL_FLAG(std::string, kv_events_replay_endpoint, "",
          "ZeroMQ ROUTER endpoint (bound) answering replay requests for missed KV event "
          "batches; empty = none.");
ABSL_FLAG(std::string, kv_events_topic, "",
          "Topic frame of every KV event message; default kv@<POD_IP or hostname>@<served "
          "model name>, the form llm-d's indexer reads.");
ABSL_FLAG(int, kv_events_queue_batches, 1024,
          "KV event batches (one per engine step) waiting for the publisher thread beyond which "
          "new ones are dropped and a full resync is sent once there is room again.");
ABSL_FLAG(int, kv_events_replay_buffer, 10000, "Published KV event batches kept for replay.");
ABSL_FLAG(std::string, kv_events_config, "",
          "vLLM's KV events JSON object, instead of the --kv-events-* flags: "
          "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": "
          "\"tcp://*:5557\", \"replay_endpoint\": ..., \"buffer_steps\": 10000, \"hwm\": "
          "100000, \"max_queue_size\": 100000, \"topic\": \"\"} (vLLM's defaults); "
          "also key by key, --kv-events-config.endpoint tcp://*:5557. Empty = the flags.");

// Speculative decoding.
ABSL_FLAG(std::string, speculative_config, "",
          "Speculative decoding, vLLM's JSON object, e.g. {\"method\": \"ngram\", "
          "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}; "
          "keys: method (ngram, draft_model, eagle, eagle3), model, num_speculative_tokens, "
          "prompt_lookup_max, prompt_lookup_min, disable_by_batch_size, "
          "num_speculative_tokens_per_batch_size ([[first, last, k], ...]), "
          "draft_tensor_parallel_size, max_model_len, quantization (draft_model); also key by "
          "key, --speculative-config.method ngram. "
          "Empty = off.");
// LoRA adapters (docs/lora.md; vLLM's names, and --lora-dir of our own).
ABSL_FLAG(bool, enable_lora, false, "Serve LoRA adapters; the flags below need it.");
ABSL_FLAG(std::string, lora_modules, "",
          "Adapters served from the start: NAME=PATH, or vLLM's JSON object {\"name\", "
          "\"path\", \"base_model_name\"}, several separated by spaces or commas, or as "
          "several words (vLLM's --lora-modules a=/x b=/y).");
ABSL_FLAG(int, max_loras, pagoda::lora::LoraOptions().max_loras,
          "Adapters resident in the workers' slots at once: the most distinct adapters a step "
          "runs.");
ABSL_FLAG(int, max_lora_rank, pagoda::lora::LoraOptions().max_lora_rank,
          "The largest adapter rank r accepted, 1 to 512.");
ABSL_FLAG(int, max_lora_trainable_tokens, 0,
          "The most trainable tokens (PEFT's trainable_token_indices: whole embedding or "
          "lm_head rows) an adapter may replace per module, 0 to 16384; 0 refuses such "
          "adapters.");
ABSL_FLAG(int, max_cpu_loras, 0,
          "Adapters kept in host memory (least recently used evicted); 0 = --max-loras.");
ABSL_FLAG(std::string, lora_dir, "",
          "The only directory runtime adapter loads may read (anything outside is refused, "
          "403); empty: none may.");

namespace pagoda::scheduler {
namespace {

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

ModelOptions ReadModelFlags() {
  ModelOptions model;
  model.model_dir = absl::GetFlag(FLAGS_model);
  model.served_model_name = absl::GetFlag(FLAGS_served_model_name);
  model.dtype = absl::GetFlag(FLAGS_dtype);
  model.kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype);
  model.quantization = absl::GetFlag(FLAGS_quantization);
  model.cpu_weight_only_activations = absl::GetFlag(FLAGS_cpu_weight_only_activations);
  model.max_model_len = absl::GetFlag(FLAGS_max_model_len);
  model.chat_template = absl::GetFlag(FLAGS_chat_template);
  model.chat_template_content_format = absl::GetFlag(FLAGS_chat_template_content_format);
  model.generation_config = absl::GetFlag(FLAGS_generation_config);
  model.override_generation_config = absl::GetFlag(FLAGS_override_generation_config);
  model.tool_call_parser = absl::GetFlag(FLAGS_tool_call_parser);
  model.enable_auto_tool_choice = absl::GetFlag(FLAGS_enable_auto_tool_choice);
  model.reasoning_parser = absl::GetFlag(FLAGS_reasoning_parser);
  model.max_logprobs = absl::GetFlag(FLAGS_max_logprobs);
  return model;
}

FrontDoorOptions ReadFrontDoorFlags() {
  FrontDoorOptions door;
  door.host = absl::GetFlag(FLAGS_host);
  door.port = absl::GetFlag(FLAGS_port);
  door.http_port = absl::GetFlag(FLAGS_http_port);
  door.http_max_connections = absl::GetFlag(FLAGS_http_max_connections);
  door.http_io_threads = absl::GetFlag(FLAGS_http_io_threads);
  door.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  door.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  if (door.metrics_host.empty()) door.metrics_host = door.host;
  door.api_key = absl::GetFlag(FLAGS_api_key);
  if (const char* key = std::getenv("PAGODA_API_KEY"); door.api_key.empty() && key != nullptr) {
    door.api_key = key;
  }
  door.ssl_certfile = absl::GetFlag(FLAGS_ssl_certfile);
  door.ssl_keyfile = absl::GetFlag(FLAGS_ssl_keyfile);
  door.ssl_ca_certs = absl::GetFlag(FLAGS_ssl_ca_certs);
  door.max_stream_queued_messages = absl::GetFlag(FLAGS_max_stream_queued_messages);
  door.vllm_metric_names = absl::GetFlag(FLAGS_vllm_metric_names);
  door.vllm_grpc_api = absl::GetFlag(FLAGS_vllm_grpc_api);
  door.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  door.log_stats = !absl::GetFlag(FLAGS_disable_log_stats);
  if (const char* interval = std::getenv("VLLM_LOG_STATS_INTERVAL"); interval != nullptr) {
    if (!absl::SimpleAtod(interval, &door.log_stats_interval)) door.log_stats_interval = NAN;
  }
  door.enable_prompt_tokens_details = absl::GetFlag(FLAGS_enable_prompt_tokens_details);
  door.enable_force_include_usage = absl::GetFlag(FLAGS_enable_force_include_usage);
  door.enable_server_load_tracking = absl::GetFlag(FLAGS_enable_server_load_tracking);
  door.return_tokens_as_token_ids = absl::GetFlag(FLAGS_return_tokens_as_token_ids);
  door.response_role = absl::GetFlag(FLAGS_response_role);
  door.log_requests = absl::GetFlag(FLAGS_enable_log_requests);
  const char* level = std::getenv("VLLM_LOGGING_LEVEL");
  door.log_request_details =
      door.log_requests && level != nullptr && absl::string_view(level) == "DEBUG";
  door.log_outputs = absl::GetFlag(FLAGS_enable_log_outputs);
  door.max_log_len = absl::GetFlag(FLAGS_max_log_len);
  return door;
}

absl::StatusOr<SchedulingOptions> ReadSchedulingFlags() {
  SchedulingOptions scheduling;
  scheduling.max_num_seqs = absl::GetFlag(FLAGS_max_num_seqs);
  scheduling.max_num_batched_tokens = absl::GetFlag(FLAGS_max_num_batched_tokens);
  scheduling.enable_chunked_prefill = absl::GetFlag(FLAGS_enable_chunked_prefill);
  scheduling.async_scheduling = absl::GetFlag(FLAGS_async_scheduling);
  scheduling.max_num_partial_prefills = absl::GetFlag(FLAGS_max_num_partial_prefills);
  scheduling.max_long_partial_prefills = absl::GetFlag(FLAGS_max_long_partial_prefills);
  scheduling.long_prefill_token_threshold = absl::GetFlag(FLAGS_long_prefill_token_threshold);
  absl::StatusOr<SchedulingPolicy> policy =
      ParseSchedulingPolicy(absl::GetFlag(FLAGS_scheduling_policy));
  if (!policy.ok()) return policy.status();
  scheduling.policy = *policy;
  absl::StatusOr<PreemptionMode> preemption =
      ParsePreemptionMode(absl::GetFlag(FLAGS_preemption_mode));
  if (!preemption.ok()) return preemption.status();
  scheduling.preemption_mode = *preemption;
  scheduling.enable_prefix_caching = absl::GetFlag(FLAGS_enable_prefix_caching);
  scheduling.max_queued_requests = absl::GetFlag(FLAGS_max_queued_requests);
  scheduling.seed = absl::GetFlag(FLAGS_seed);
  return scheduling;
}

CacheOptions ReadCacheFlags() {
  CacheOptions cache;
  cache.block_size = absl::GetFlag(FLAGS_block_size);
  cache.gpu_memory_utilization = absl::GetFlag(FLAGS_gpu_memory_utilization);
  cache.num_gpu_blocks_override = absl::GetFlag(FLAGS_num_gpu_blocks_override);
  cache.cpu_kv_cache_space_gib = absl::GetFlag(FLAGS_cpu_kv_cache_space);
  cache.swap_space_gib = absl::GetFlag(FLAGS_swap_space);
  return cache;
}

WorkerOptions ReadWorkerFlags() {
  WorkerOptions workers;
  workers.device = absl::GetFlag(FLAGS_device);
  workers.tensor_parallel_size = absl::GetFlag(FLAGS_tensor_parallel_size);
  workers.addresses = absl::StrSplit(absl::GetFlag(FLAGS_worker_addresses), ',', absl::SkipEmpty());
  workers.secret_file = absl::GetFlag(FLAGS_worker_secret_file);
  workers.ssl_certfile = absl::GetFlag(FLAGS_worker_ssl_certfile);
  workers.ssl_keyfile = absl::GetFlag(FLAGS_worker_ssl_keyfile);
  workers.ssl_ca_certs = absl::GetFlag(FLAGS_worker_ssl_ca_certs);
  workers.ssl_server_name = absl::GetFlag(FLAGS_worker_ssl_server_name);
  workers.binary = absl::GetFlag(FLAGS_worker_binary);
  workers.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  workers.enforce_eager = absl::GetFlag(FLAGS_enforce_eager);
  workers.restart_limit = absl::GetFlag(FLAGS_worker_restart_limit);
  workers.restart_window = absl::GetFlag(FLAGS_worker_restart_window);
  workers.failure_exit_delay = absl::GetFlag(FLAGS_worker_failure_exit_delay);
  workers.stall_timeout = absl::GetFlag(FLAGS_worker_stall_timeout);
  workers.start_timeout = absl::GetFlag(FLAGS_worker_start_timeout);
  workers.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  workers.rendezvous_host = absl::GetFlag(FLAGS_rendezvous_host);
  workers.rendezvous_port = absl::GetFlag(FLAGS_rendezvous_port);
  return workers;
}

// The --kv-events-* flags, which --kv-events-config replaces.
constexpr const char* kKvEventFlags[] = {"kv_events_endpoint", "kv_events_replay_endpoint",
                                         "kv_events_topic", "kv_events_queue_batches",
                                         "kv_events_replay_buffer"};

absl::StatusOr<KvEventOptions> ReadKvEventFlags() {
  const std::string json = absl::GetFlag(FLAGS_kv_events_config);
  if (!json.empty()) {
    for (const char* name : kKvEventFlags) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag->CurrentValue() == flag->DefaultValue()) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "--kv-events-config and --", absl::StrReplaceAll(name, {{"_", "-"}}),
          " set the same options: give --kv-events-config alone, or the --kv-events-* flags"));
    }
    return ParseKvEventsConfig(json);
  }
  KvEventOptions events;
  events.endpoint = absl::GetFlag(FLAGS_kv_events_endpoint);
  events.replay_endpoint = absl::GetFlag(FLAGS_kv_events_replay_endpoint);
  events.topic = absl::GetFlag(FLAGS_kv_events_topic);
  events.queue_batches = absl::GetFlag(FLAGS_kv_events_queue_batches);
  events.replay_buffer = absl::GetFlag(FLAGS_kv_events_replay_buffer);
  return events;
}

absl::StatusOr<std::optional<SpeculativeConfig>> ReadSpeculativeFlag() {
  const std::string json = absl::GetFlag(FLAGS_speculative_config);
  if (json.empty()) return std::nullopt;
  absl::StatusOr<SpeculativeConfig> parsed = ParseSpeculativeConfig(json);
  if (!parsed.ok()) return parsed.status();
  return std::optional<SpeculativeConfig>(*std::move(parsed));
}

absl::StatusOr<lora::LoraOptions> ReadLoraFlags() {
  lora::LoraOptions options;
  options.enable_lora = absl::GetFlag(FLAGS_enable_lora);
  absl::StatusOr<std::vector<lora::LoraModuleSpec>> modules =
      lora::ParseLoraModules(lora::SplitLoraModulesFlag(absl::GetFlag(FLAGS_lora_modules)));
  if (!modules.ok()) return modules.status();
  options.modules = *std::move(modules);
  options.max_loras = absl::GetFlag(FLAGS_max_loras);
  options.max_lora_rank = absl::GetFlag(FLAGS_max_lora_rank);
  options.max_cpu_loras = absl::GetFlag(FLAGS_max_cpu_loras);
  options.max_lora_trainable_tokens = absl::GetFlag(FLAGS_max_lora_trainable_tokens);
  options.lora_dir = absl::GetFlag(FLAGS_lora_dir);
  if (absl::Status status = lora::ValidateLoraOptions(options); !status.ok()) return status;
  return options;
}

}  // namespace

absl::StatusOr<ServerConfig> ServerConfigFromFlags(const std::vector<std::string>& arguments) {
  ServerConfig config;
  config.model = ReadModelFlags();
  if (arguments.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected arguments: ", absl::StrJoin(arguments, " "),
                     " (one argument, the model directory, or none with --model DIR)"));
  }
  if (arguments.size() == 1) {
    if (!config.model.model_dir.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument ", arguments[0], " (the model is --model ", config.model.model_dir,
          "; a second model directory, or a word meant for a flag?)"));
    }
    config.model.model_dir = arguments[0];
  }
  config.config_file = absl::GetFlag(FLAGS_config);
  config.vllm_no_ops = {absl::GetFlag(FLAGS_trust_remote_code),
                        absl::GetFlag(FLAGS_disable_custom_all_reduce),
                        absl::GetFlag(FLAGS_load_format),
                        absl::GetFlag(FLAGS_distributed_executor_backend),
                        absl::GetFlag(FLAGS_disable_uvicorn_access_log),
                        absl::GetFlag(FLAGS_disable_fastapi_docs),
                        absl::GetFlag(FLAGS_uvicorn_log_level)};
  config.front_door = ReadFrontDoorFlags();
  absl::StatusOr<SchedulingOptions> scheduling = ReadSchedulingFlags();
  if (!scheduling.ok()) return scheduling.status();
  config.scheduling = *std::move(scheduling);
  config.cache = ReadCacheFlags();
  config.workers = ReadWorkerFlags();
  absl::StatusOr<KvEventOptions> kv_events = ReadKvEventFlags();
  if (!kv_events.ok()) return kv_events.status();
  config.kv_events = *std::move(kv_events);
  absl::StatusOr<std::optional<SpeculativeConfig>> speculative = ReadSpeculativeFlag();
  if (!speculative.ok()) return speculative.status();
  config.speculative = *std::move(speculative);
  absl::StatusOr<lora::LoraOptions> lora = ReadLoraFlags();
  if (!lora.ok()) return lora.status();
  config.lora = *std::move(lora);
  if (absl::Status status = CheckServerConfig(config); !status.ok()) return status;
  return config;
}

std::vector<std::string> ServerJsonFlags() {
  return {"speculative_config", "kv_events_config", "override_generation_config"};
}

std::vector<std::pair<std::string, std::string>> ServerFlagAliases() {
  return {{"tp", "tensor_parallel_size"}, {"q", "quantization"}};
}

std::vector<std::string> ServerListFlags() { return {"lora_modules", "served_model_name"}; }

std::vector<std::string> ServerHumanReadableIntFlags() {
  return {"max_model_len", "max_num_batched_tokens"};
}

std::vector<FlagGroup> ServerFlagGroups() {
  return {
      {"Model",
       {"config", "model", "served_model_name", "dtype", "kv_cache_dtype", "quantization",
        "cpu_weight_only_activations", "max_model_len", "chat_template",
        "chat_template_content_format", "generation_config", "override_generation_config",
        "tool_call_parser", "enable_auto_tool_choice", "max_logprobs", "reasoning_parser"}},
      {"Front doors: gRPC, OpenAI HTTP, metrics",
       {"host",
        "port",
        "http_port",
        "http_max_connections",
        "http_io_threads",
        "metrics_port",
        "metrics_host",
        "api_key",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_ca_certs",
        "max_stream_queued_messages",
        "vllm_metric_names",
        "vllm_grpc_api",
        "drain_timeout",
        "enable_prompt_tokens_details",
        "enable_force_include_usage",
        "enable_server_load_tracking",
        "return_tokens_as_token_ids",
        "response_role"}},
      {"Logs", {"disable_log_stats", "enable_log_requests", "enable_log_outputs", "max_log_len"}},
      {"Scheduling",
       {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
        "max_num_partial_prefills", "max_long_partial_prefills", "long_prefill_token_threshold",
        "scheduling_policy", "preemption_mode", "enable_prefix_caching", "max_queued_requests",
        "seed", "async_scheduling"}},
      {"KV cache",
       {"block_size", "gpu_memory_utilization", "num_gpu_blocks_override", "cpu_kv_cache_space",
        "swap_space"}},
      {"Workers",
       {"device", "tensor_parallel_size", "worker_addresses", "worker_secret_file",
        "worker_ssl_certfile", "worker_ssl_keyfile", "worker_ssl_ca_certs",
        "worker_ssl_server_name", "worker_binary", "cpu_threads", "enforce_eager",
        "worker_restart_limit", "worker_restart_window", "worker_failure_exit_delay",
        "worker_stall_timeout", "worker_start_timeout", "collective_timeout", "rendezvous_host",
        "rendezvous_port"}},
      {"vLLM's flags with no effect here",
       {"trust_remote_code", "disable_custom_all_reduce", "load_format",
        "distributed_executor_backend", "disable_uvicorn_access_log", "disable_fastapi_docs",
        "uvicorn_log_level"}},
      {"KV events",
       {"kv_events_endpoint", "kv_events_replay_endpoint", "kv_events_topic",
        "kv_events_queue_batches", "kv_events_replay_buffer", "kv_events_config"}},
      {"Speculative decoding", {"speculative_config"}},
      {"LoRA adapters",
       {"enable_lora", "lora_modules", "max_loras", "max_lora_rank", "max_cpu_loras",
        "max_lora_trainable_tokens", "lora_dir"}},
  };
}

}  // namespace pagoda::scheduler
