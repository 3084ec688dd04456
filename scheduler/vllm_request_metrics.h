#ifndef PAGODA_SCHEDULER_VLLM_REQUEST_METRICS_H_
#define PAGODA_SCHEDULER_VLLM_REQUEST_METRICS_H_

// vLLM's request and token metric families, under vLLM's names, types,
// units and buckets (vllm/v1/metrics/loggers.py), beside Pagoda's own, so a
// dashboard built for vLLM (its production Grafana dashboard: token
// throughput, TTFT, inter-token latency, end-to-end latency, queue, prefill
// and decode time, prompt and generation lengths, finish reasons) works
// unchanged. Fed by ServerMetrics from the same engine records as the
// pagoda_* families. Thread-safe as prometheus-cpp's instruments are.

#include <memory>
#include <string>

#include "scheduler/engine/engine_stats.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace pagoda::scheduler {

class VllmRequestMetrics {
 public:
  // Registers every family in `registry`, labelled model_name.
  VllmRequestMetrics(prometheus::Registry& registry, const std::string& model_name);
  ~VllmRequestMetrics();
  VllmRequestMetrics(const VllmRequestMetrics&) = delete;
  VllmRequestMetrics& operator=(const VllmRequestMetrics&) = delete;

  // The counters follow the engine's totals; the step's tokens are one
  // observation of vllm:iteration_tokens_total.
  void OnStep(const StepRecord& step, const EngineSnapshot& snapshot);
  // One observation per finished request in each per-request family.
  void OnRequestFinished(const RequestRecord& record);

 private:
  struct Instruments;
  std::unique_ptr<Instruments> in_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_VLLM_REQUEST_METRICS_H_
