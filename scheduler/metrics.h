#ifndef PAGODA_SCHEDULER_METRICS_H_
#define PAGODA_SCHEDULER_METRICS_H_

// ServerMetrics: the engine's Prometheus metrics (pagoda_* and vLLM's names)
// and the /metrics endpoint that serves them.

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/engine/engine_stats.h"

namespace prometheus {
class Collectable;
class Exposer;
class Registry;
}  // namespace prometheus

namespace pagoda::scheduler {

// Prometheus metrics of the engine, named pagoda_* after vLLM's set and
// labelled model_name, served over HTTP at /metrics. An EngineObserver:
// the engine feeds it every step and every finished request.
// Thread-safe. The gauges are set by each scrape alone, from one snapshot
// of the engine under one lock, so a scrape reads them as of one moment;
// the engine's own calls only advance counters and histograms and never
// wait for a scrape.
class LoraRequestsInfo;
class SpecDecodeMetrics;
class VllmRequestMetrics;

class ServerMetrics : public EngineObserver {
 public:
  // Listens on host:port (port 0 = the OS picks). Errors: UNAVAILABLE when
  // the port cannot be bound.
  //
  // With `vllm_names`, the state vLLM's consumers read (the Gateway API
  // Inference Extension's endpoint picker, production-stack's router) is
  // also exported under vLLM's own names: vllm:num_requests_running,
  // vllm:num_requests_waiting, vllm:kv_cache_usage_perc,
  // vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_hits_total,
  // vllm:gpu_prefix_cache_queries_total and (after SetCacheConfig)
  // vllm:cache_config_info, each labelled model_name; vLLM's request
  // and token families (vllm_request_metrics.h); and, while the engine
  // serves LoRA adapters, vllm:lora_requests_info (lora_metrics.h), set at
  // each scrape.
  static absl::StatusOr<std::unique_ptr<ServerMetrics>> Start(const std::string& host, int port,
                                                              const std::string& model_name,
                                                              bool vllm_names = false);
  ~ServerMetrics() override;
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  int port() const { return port_; }
  // Where other parts of the server (the HTTP API) register their metrics.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Where every scrape reads the engine's current state for the gauges, so
  // they are true while the engine is idle too (it calls OnStep only when it
  // steps): an idle engine shows zero running requests, batch size 0 and
  // every block free. nullptr stops it (the gauges keep their last values);
  // the source must stay valid until then.
  void SetSnapshotSource(std::function<EngineSnapshot()> source);

  // The KV cache's shape, known once the workers are up: published as
  // vllm:cache_config_info{block_size, num_gpu_blocks, ...} = 1 when vLLM
  // names are on (else ignored). Call once.
  void SetCacheConfig(int block_size, int num_gpu_blocks, int num_cpu_blocks,
                      bool enable_prefix_caching);

  // Speculative decoding is on with k = `num_speculative_tokens`: its
  // counters (spec_decode_metrics.h) are registered and follow the engine.
  // Call once, before the engine starts.
  void SetSpeculation(int num_speculative_tokens);

  // Serves `collectable` at `uri` on the metrics port besides /metrics
  // (the KV-cache debug page). It must stay valid until the metrics stop.
  void RegisterPage(const std::shared_ptr<prometheus::Collectable>& collectable,
                    const std::string& uri);

  void OnStep(const StepRecord& step, const EngineSnapshot& snapshot) override;
  void OnRequestFinished(const RequestRecord& record) override;
  void OnWorkersRecovered(int requests_resumed, double seconds) override;

 private:
  struct Instruments;
  class ConsistentScrape;
  ServerMetrics() = default;
  void SetGauges(const EngineSnapshot& snapshot, int batch_size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefreshFromSourceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Held by a scrape while it sets the gauges and collects them, so that
  // two scrapes never interleave.
  absl::Mutex mu_;
  std::function<EngineSnapshot()> source_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ConsistentScrape> scrape_;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Instruments> instruments_;
  std::unique_ptr<VllmRequestMetrics> vllm_requests_;  // Null without vLLM names.
  std::unique_ptr<SpecDecodeMetrics> spec_decode_;     // Null without speculation.
  // vllm:lora_requests_info: made at the first scrape of an engine serving
  // LoRA adapters, with vLLM names on.
  std::unique_ptr<LoraRequestsInfo> lora_info_ ABSL_GUARDED_BY(mu_);
  std::string model_name_;
  bool vllm_names_ = false;
  int port_ = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_METRICS_H_
