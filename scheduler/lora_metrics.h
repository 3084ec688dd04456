// vllm:lora_requests_info, as vLLM's Prometheus logger writes it (the
// Gateway API Inference Extension's LoRA affinity reads it): a gauge whose
// value is the Unix time of its last update, labelled max_lora (--max-loras)
// and running_lora_adapters / waiting_lora_adapters (the adapter names of
// the running and of the waiting requests, comma-joined, each once, in
// queue order). As in vLLM, every label set seen stays a series with the
// time it was last current, so a reader takes the series of the latest
// value; unlike vLLM, only the kMaxLoraInfoSeries most recent are kept, so
// adapter churn cannot grow the scrape without bound.
#ifndef PAGODA_SCHEDULER_LORA_METRICS_H_
#define PAGODA_SCHEDULER_LORA_METRICS_H_

#include <list>
#include <string>

#include "absl/time/time.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "scheduler/engine/engine_stats.h"

namespace pagoda::scheduler {

inline constexpr int kMaxLoraInfoSeries = 32;

// Not thread-safe: ServerMetrics calls it under its scrape lock.
class LoraRequestsInfo {
 public:
  explicit LoraRequestsInfo(prometheus::Registry& registry);
  // Makes `activity`'s label set the current series, valued `now`.
  void Update(const LoraActivity& activity, absl::Time now);

 private:
  prometheus::Family<prometheus::Gauge>& family_;
  std::list<std::pair<prometheus::Labels, prometheus::Gauge*>> recent_;  // Latest first.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_LORA_METRICS_H_
