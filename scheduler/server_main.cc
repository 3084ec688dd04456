// pagoda-server: the scheduler process. The start-up sequence, in the order
// that refuses bad input cheapest first: the flags (one ServerConfig, every
// rule checked), the model's files and the rules that need them, the ports
// (a busy one is found before any worker starts), the --lora-modules
// adapters, metrics and KV events, the workers and their KV cache, then
// serving until SIGTERM/SIGINT, when it drains. Each stage lives in
// scheduler/startup/.
//
// After binding it prints "PAGODA_SERVER_LISTENING <port>" (and, with
// metrics on, "PAGODA_METRICS_LISTENING <port>"; with spawned workers,
// "PAGODA_WORKER_PIDS <pid>,...") to stdout, so launchers that asked for
// port 0 learn the ports.

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"
#include "common/protobuf_log.h"
#include "glog/logging.h"
#include "scheduler/config/server_config.h"
#include "scheduler/config/server_flags.h"
#include "scheduler/startup/draft_model_files.h"
#include "scheduler/startup/front_doors.h"
#include "scheduler/startup/kv_events_wiring.h"
#include "scheduler/startup/lora_modules.h"
#include "scheduler/startup/model_files.h"
#include "scheduler/startup/serving.h"
#include "scheduler/startup/stop_signals.h"
#include "scheduler/startup/worker_startup.h"

namespace pagoda::scheduler {
namespace {

absl::Status Serve(absl::StatusOr<ServerConfig> config) {
  if (!config.ok()) return config.status();
  if (!config->config_file.empty()) {
    LOG(INFO) << "flags from --config " << config->config_file << " (the command line's win)";
  }
  if (const std::string no_ops = DescribeVllmNoOpFlags(config->vllm_no_ops); !no_ops.empty()) {
    LOG(INFO) << no_ops;
  }
  absl::StatusOr<ModelFiles> model = LoadModelFiles(config->model);
  if (!model.ok()) return model.status();
  if (absl::Status status = ResolveForModel(model->config, &*config); !status.ok()) return status;
  if (config->speculative.has_value()) {
    absl::Status draft = CheckDraftModelFiles(
        &*config->speculative, model->config, config->model.max_model_len, model->tokenizer.get(),
        DraftTensorParallelSize(*config->speculative, config->workers.tensor_parallel_size));
    if (!draft.ok()) return draft;
  }
  if (absl::Status status = CheckFrontDoorPortsFree(config->front_door); !status.ok()) {
    return status;
  }
  // The served adapters: the front doors' and the engine's, for good.
  lora::LoraRegistry lora_registry;
  if (absl::Status status = RegisterLoraModules(config->lora, model->config, lora_registry);
      !status.ok()) {
    return status;
  }
  const std::string model_name = ServedModelName(config->model);
  absl::StatusOr<std::unique_ptr<ServerMetrics>> metrics =
      StartMetrics(config->front_door, model_name);
  if (!metrics.ok()) return metrics.status();
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> kv_events =
      StartKvEventPublisher(config->kv_events, model_name, &lora_registry);
  if (!kv_events.ok()) return kv_events.status();
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> workers = StartWorkers(*config, model->config);
  if (!workers.ok()) return workers.status();
  absl::StatusOr<WorkerCache> cache = LoadModelOnWorkers(*config, **workers);
  if (!cache.ok()) return cache.status();
  if (*metrics != nullptr) {
    (*metrics)->SetCacheConfig(config->cache.block_size, cache->num_gpu_blocks,
                               cache->num_cpu_blocks, config->scheduling.enable_prefix_caching);
  }
  absl::Status served = ServeUntilStopSignal(*config, *model, *cache, metrics->get(),
                                             kv_events->get(), **workers, &lora_registry);
  // Every port is released before "stopped", so a restart right after it
  // binds them again.
  metrics->reset();
  kv_events->reset();
  LOG(INFO) << "stopped";
  return served;
}

}  // namespace
}  // namespace pagoda::scheduler

int main(int argc, char** argv) {
  const std::vector<char*> positional = pagoda::ParsePagodaCommandLine(
      argc, argv,
      {"pagoda-server",
       "pagoda-server --model DIR [flags] (or pagoda-server DIR [flags]): serves "
       "pagoda.v1.Generation",
       pagoda::scheduler::ServerFlagGroups(), pagoda::scheduler::ServerJsonFlags(),
       pagoda::scheduler::ServerFlagAliases(), pagoda::scheduler::ServerListFlags(),
       /*takes_arguments=*/true, /*reads_config_file=*/true,
       pagoda::scheduler::ServerHumanReadableIntFlags()});
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  pagoda::LimitProtobufLogging();
  // Before any thread starts, so only the waiting thread sees the signals.
  pagoda::scheduler::BlockStopSignals();

  absl::Status status = pagoda::scheduler::Serve(pagoda::scheduler::ServerConfigFromFlags(
      std::vector<std::string>(positional.begin() + 1, positional.end())));
  if (!status.ok()) {
    std::cerr << "pagoda-server: " << status.message() << std::endl;
    return 1;
  }
  return 0;
}
