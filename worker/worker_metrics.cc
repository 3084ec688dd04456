#include "worker/worker_metrics.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "worker/http_page_server.h"

namespace pagoda::worker {
namespace {

// Prometheus' text exposition format.
constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// pagoda_worker_idle_between_steps_seconds from its snapshot.
prometheus::MetricFamily IdleFamily(const std::string& rank,
                                    const StepIdleHistogram::Snapshot& idle) {
  prometheus::MetricFamily family;
  family.name = "pagoda_worker_idle_between_steps_seconds";
  family.help =
      "Time the device waited between steps: from the end of one step's forward pass and "
      "sampling to the start of the next step.";
  family.type = prometheus::MetricType::Histogram;
  prometheus::ClientMetric metric;
  metric.label.push_back({"rank", rank});
  metric.histogram.sample_count = idle.count;
  metric.histogram.sample_sum = idle.sum_seconds;
  for (size_t i = 0; i < StepIdleHistogram::kBounds.size(); ++i) {
    metric.histogram.bucket.push_back(
        {.cumulative_count = idle.cumulative[i], .upper_bound = StepIdleHistogram::kBounds[i]});
  }
  metric.histogram.bucket.push_back(
      {.cumulative_count = idle.count, .upper_bound = std::numeric_limits<double>::infinity()});
  family.metric.push_back(std::move(metric));
  return family;
}

// The families built from the worker's counts at each scrape, so nothing is
// copied between scrapes.
std::vector<prometheus::MetricFamily> Families(const std::string& rank,
                                               const WorkerCounts& counts) {
  prometheus::MetricFamily refused;
  refused.name = "pagoda_worker_refused_calls_total";
  refused.help = "Calls this worker refused for a missing or wrong secret.";
  refused.type = prometheus::MetricType::Counter;
  prometheus::ClientMetric metric;
  metric.label.push_back({"rank", rank});
  metric.counter.value = static_cast<double>(counts.refused_calls);
  refused.metric.push_back(std::move(metric));
  return {std::move(refused), IdleFamily(rank, counts.idle_between_steps)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerMetrics>> WorkerMetrics::Start(
    const std::string& host, int port, int rank, std::function<WorkerCounts()> counts) {
  std::unique_ptr<WorkerMetrics> metrics(new WorkerMetrics());
  absl::StatusOr<std::unique_ptr<HttpPageServer>> server = HttpPageServer::Start(
      host, port,
      {.path = "/metrics",
       .content_type = kContentType,
       .body = [rank = absl::StrCat(rank), counts = std::move(counts)] {
         return prometheus::TextSerializer().Serialize(Families(rank, counts()));
       }});
  if (!server.ok()) return server.status();
  metrics->server_ = *std::move(server);
  return metrics;
}

int WorkerMetrics::port() const { return server_->port(); }

WorkerMetrics::~WorkerMetrics() = default;

}  // namespace pagoda::worker
