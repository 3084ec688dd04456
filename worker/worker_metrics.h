#ifndef PAGODA_WORKER_WORKER_METRICS_H_
#define PAGODA_WORKER_WORKER_METRICS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace pagoda::worker {

// What a worker counts, read at each scrape.
struct WorkerCounts {
  // Calls refused for a missing or wrong secret (WorkerService::refused_calls).
  int64_t refused_calls = 0;
};

// pagoda-worker's /metrics endpoint (--metrics-port), in Prometheus text
// format (docs/metrics.md, "Worker"): pagoda_worker_refused_calls_total,
// labelled with the worker's rank. Thread-safe; `counts` is called from the
// HTTP server's threads and must stay callable until this object is gone.
class WorkerMetrics {
 public:
  // Listens on host:port (port 0 = the OS picks, see port()). UNAVAILABLE
  // when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Start(const std::string& host, int port,
                                                              int rank,
                                                              std::function<WorkerCounts()> counts);
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  int port() const { return port_; }

 private:
  class Collector;
  WorkerMetrics() = default;

  // The exposer holds the collector weakly: both live here, the exposer
  // (its HTTP threads) going first.
  std::shared_ptr<Collector> collector_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WORKER_METRICS_H_
