#include "worker/worker_metrics.h"

#include <exception>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/metric_family.h"

namespace pagoda::worker {

// Builds the families from the worker's counts at each scrape, so nothing
// is copied between scrapes.
class WorkerMetrics::Collector : public prometheus::Collectable {
 public:
  Collector(int rank, std::function<WorkerCounts()> counts)
      : rank_(absl::StrCat(rank)), counts_(std::move(counts)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const WorkerCounts counts = counts_();
    prometheus::MetricFamily refused;
    refused.name = "pagoda_worker_refused_calls_total";
    refused.help = "Calls this worker refused for a missing or wrong secret.";
    refused.type = prometheus::MetricType::Counter;
    prometheus::ClientMetric metric;
    metric.label.push_back({"rank", rank_});
    metric.counter.value = static_cast<double>(counts.refused_calls);
    refused.metric.push_back(std::move(metric));
    return {std::move(refused)};
  }

 private:
  const std::string rank_;
  const std::function<WorkerCounts()> counts_;
};

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(
    const std::string& host, int port, int rank, std::function<WorkerCounts()> counts) {
  std::unique_ptr<WorkerMetrics> metrics(new WorkerMetrics());
  try {
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(absl::StrCat(host, ":", port));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port, ": ", e.what()));
  }
  const std::vector<int> ports = metrics->exposer_->GetListeningPorts();
  metrics->port_ = ports.empty() ? port : ports.front();
  metrics->collector_ = std::make_shared<Collector>(rank, std::move(counts));
  metrics->exposer_->RegisterCollectable(metrics->collector_);
  return metrics;
}

WorkerMetrics::~WorkerMetrics() { exposer_.reset(); }

}  // namespace pagoda::worker
