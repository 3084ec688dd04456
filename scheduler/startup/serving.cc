#include "scheduler/startup/serving.h"

#include <iostream>
#include <memory>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "scheduler/api/frontend.h"
#include "scheduler/api/http_server.h"
#include "scheduler/api/lora_adapters.h"
#include "scheduler/api/request_path.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/api/vllm_engine_service.h"
#include "scheduler/engine/engine.h"
#include "scheduler/startup/front_doors.h"
#include "scheduler/startup/kv_events_wiring.h"
#include "scheduler/startup/stop_signals.h"
#include "scheduler/stats_log.h"

namespace pagoda::scheduler {
namespace {

EngineConfig MakeEngineConfig(const ServerConfig& config, const ModelConfig& model,
                              const WorkerCache& cache, lora::LoraRegistry* lora_registry) {
  const SchedulingOptions& scheduling = config.scheduling;
  EngineConfig engine;
  engine.scheduler.block_size = config.cache.block_size;
  engine.scheduler.num_gpu_blocks = cache.num_gpu_blocks;
  engine.scheduler.num_cpu_blocks = cache.num_cpu_blocks;
  engine.scheduler.max_num_seqs = scheduling.max_num_seqs;
  engine.scheduler.max_num_batched_tokens = scheduling.max_num_batched_tokens;
  engine.scheduler.max_model_len = cache.max_model_len;
  engine.scheduler.preemption_mode = scheduling.preemption_mode;
  engine.scheduler.enable_chunked_prefill = scheduling.enable_chunked_prefill;
  engine.scheduler.max_num_partial_prefills = scheduling.max_num_partial_prefills;
  engine.scheduler.long_prefill_token_threshold = scheduling.long_prefill_token_threshold;
  engine.scheduler.max_long_partial_prefills = scheduling.max_long_partial_prefills;
  engine.scheduler.policy = scheduling.policy;
  engine.scheduler.enable_prefix_caching = scheduling.enable_prefix_caching;
  engine.eos_token_ids.assign(model.eos_token_ids.begin(), model.eos_token_ids.end());
  engine.vocab_size = model.vocab_size;
  engine.max_queued_requests = scheduling.max_queued_requests;
  engine.speculative = config.speculative;
  engine.async_scheduling = scheduling.async_scheduling;
  engine.lora_registry = lora_registry;
  engine.max_loras = config.lora.enable_lora ? config.lora.max_loras : 0;
  return engine;
}

ServedModelInfo MakeServedModelInfo(const ServerConfig& config, const ModelFiles& model,
                                    const EngineConfig& engine_config) {
  ServedModelInfo info;
  info.model_name = ServedModelName(config.model);
  info.vocab_size = model.config.vocab_size;
  info.max_model_len = engine_config.scheduler.max_model_len;
  info.block_size = config.cache.block_size;
  info.tensor_parallel_size = config.workers.tensor_parallel_size;
  info.device = config.workers.device;
  info.eos_token_ids = engine_config.eos_token_ids;
  info.sampling_defaults = model.sampling_defaults;
  return info;
}

GenerationOptions MakeGenerationOptions(const ServerConfig& config) {
  GenerationOptions options;
  options.max_stream_queued_messages = config.front_door.max_stream_queued_messages;
  return options;
}

std::unique_ptr<LoraAdapters> MakeLoraAdapters(const ServerConfig& config, const ModelFiles& model,
                                               const EngineConfig& engine_config, Engine* engine) {
  if (!config.lora.enable_lora || engine_config.lora_registry == nullptr) return nullptr;
  LoraAdaptersOptions options;
  options.registry = engine_config.lora_registry;
  options.lora_dir = config.lora.lora_dir;
  options.max_lora_rank = config.lora.max_lora_rank;
  options.max_lora_trainable_tokens = config.lora.max_lora_trainable_tokens;
  options.base = model.config;
  const std::vector<std::string> names = ServedModelNames(config.model);
  options.base_model_name = names.front();
  options.base_model_aliases.assign(names.begin() + 1, names.end());
  options.forget = [engine](int lora_id) { engine->ForgetLoraAdapter(lora_id); };
  return std::make_unique<LoraAdapters>(std::move(options));
}

RequestPathOptions MakeRequestPathOptions(const ServerConfig& config, LoraAdapters* lora) {
  RequestPathOptions options;
  options.lora_adapters = lora;
  options.api_key = config.front_door.api_key;
  options.max_pending_tokenizations = MaxPendingTokenizations(config);
  options.request_log = {config.front_door.log_requests, config.front_door.log_request_details,
                         config.front_door.log_outputs, config.front_door.max_log_len};
  return options;
}

// After SIGTERM/SIGINT: refuse new requests, give those in flight up to
// --drain-timeout, then stop the engine, the frontends and the workers, in
// that order (each still serves the one before it).
void DrainAndStop(const std::string& why, double drain_seconds, Engine& engine,
                  GenerationService& service, FrontendServer& server, HttpServer* http,
                  GrpcWorkerGroup& workers) {
  const absl::Duration drain_timeout = absl::Seconds(drain_seconds);
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

// The services behind the front doors, built over a running engine.
struct Services {
  Services(const ServerConfig& config, const ModelFiles& model, const WorkerCache& cache,
           const EngineConfig& engine_config, Engine* engine)
      : limits(MakeModelLimits(model, cache.max_model_len, config.model.max_logprobs)),
        validator(limits, model.tokenizer.get(), config.scheduling.seed),
        lora(MakeLoraAdapters(config, model, engine_config, engine)),
        path(engine, &validator, model.tokenizer.get(), MakeRequestPathOptions(config, lora.get())),
        served(MakeServedModelInfo(config, model, engine_config)),
        options(MakeGenerationOptions(config)),
        generation(served, &path, options),
        vllm(config.front_door.vllm_grpc_api
                 ? std::make_unique<VllmEngineService>(served, &path, options)
                 : nullptr) {}
  const ModelLimits limits;
  RequestValidator validator;
  // LoRA (docs/lora.md), null without --enable-lora: the served adapters
  // (the engine's registry), which the doors Acquire and the load and
  // unload routes change; an unload reaches Engine::ForgetLoraAdapter.
  std::unique_ptr<LoraAdapters> lora;
  // Every front door's: outlives them all.
  RequestPath path;
  const ServedModelInfo served;
  const GenerationOptions options;
  GenerationService generation;
  std::unique_ptr<VllmEngineService> vllm;
};

// Serves until a stop signal or the workers are given up on, then drains.
absl::Status ServeAndDrain(const ServerConfig& config, const ModelFiles& model,
                           const WorkerCache& cache, ServerMetrics* metrics, Engine& engine,
                           const EngineConfig& engine_config, GrpcWorkerGroup& workers) {
  Services services(config, model, cache, engine_config, &engine);
  absl::StatusOr<std::unique_ptr<FrontendServer>> server =
      StartGrpcFrontend(config.front_door, services.limits, &services.generation,
                        services.vllm.get(), metrics, &engine);
  if (!server.ok()) return server.status();
  absl::StatusOr<std::unique_ptr<HttpServer>> http = StartHttpFrontend(
      config, services.served.model_name, model, cache.max_model_len, metrics, &services.path);
  if (!http.ok()) return http.status();
  std::cout << "PAGODA_SERVER_LISTENING " << (*server)->port() << std::endl;
  LOG(INFO) << "serving " << services.served.model_name << " on " << config.front_door.host << ":"
            << (*server)->port();
  std::unique_ptr<StatsLog> stats_log;
  if (config.front_door.log_stats) {
    const absl::Duration interval = absl::Seconds(config.front_door.log_stats_interval);
    stats_log = std::make_unique<StatsLog>(&engine, interval);
    LOG(INFO) << "stats line every " << interval << " (VLLM_LOG_STATS_INTERVAL)";
  } else {
    LOG(INFO) << "stats line off (--disable-log-stats)";
  }

  const int signal_number = WaitForStopSignalOrGivenUpWorkers(workers);
  const absl::Status ended = signal_number != 0
                                 ? absl::OkStatus()
                                 : LingerAfterGivingUp(config.workers.failure_exit_delay, workers);
  DrainAndStop(signal_number != 0 ? absl::StrCat("signal ", signal_number) : "workers given up",
               config.front_door.drain_timeout, engine, services.generation, **server, http->get(),
               workers);
  // Its calls ended with the server's shutdown.
  if (services.vllm != nullptr) services.vllm->WaitForCallsToFinish(absl::Seconds(1));
  return ended;
}

}  // namespace

absl::Status ServeUntilStopSignal(const ServerConfig& config, const ModelFiles& model,
                                  const WorkerCache& cache, ServerMetrics* metrics,
                                  KvEventPublisher* kv_events, GrpcWorkerGroup& workers,
                                  lora::LoraRegistry* lora_registry) {
  const EngineConfig engine_config = MakeEngineConfig(config, model.config, cache, lora_registry);
  Engine engine(engine_config, &workers, metrics);
  // Destroyed before `engine`.
  std::unique_ptr<KvEventsAttachment> kv_events_page = AttachKvEvents(engine, kv_events, metrics);
  // Scrapes read the engine's live state, so gauges fall back when idle.
  if (metrics != nullptr) metrics->SetSnapshotSource([&engine] { return engine.snapshot(); });
  if (metrics != nullptr && config.speculative.has_value()) {
    metrics->SetSpeculation(config.speculative->num_speculative_tokens);
  }
  absl::Cleanup detach_metrics = [metrics] {  // Runs before `engine` is destroyed.
    if (metrics != nullptr) metrics->SetSnapshotSource(nullptr);
  };
  engine.Start();
  absl::Status served =
      ServeAndDrain(config, model, cache, metrics, engine, engine_config, workers);
  // A front door that could not start ends the server before it listened.
  engine.Stop();
  workers.Shutdown();
  return served;
}

}  // namespace pagoda::scheduler
