// WorkerMetrics: pagoda-worker's /metrics endpoint (--metrics-port).
#ifndef PAGODA_WORKER_WORKER_METRICS_H_
#define PAGODA_WORKER_WORKER_METRICS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/step_idle_histogram.h"

namespace pagoda::worker {

class HttpPageServer;

// What a worker counts, read at each scrape.
struct WorkerCounts {
  // Calls refused for a missing or wrong secret (WorkerService::refused_calls).
  int64_t refused_calls = 0;
  // The gaps between steps (WorkerService::idle_between_steps).
  StepIdleHistogram::Snapshot idle_between_steps;
};

// pagoda-worker's /metrics endpoint (--metrics-port), in Prometheus text
// format (docs/metrics.md, "Worker"): pagoda_worker_refused_calls_total and
// the histogram pagoda_worker_idle_between_steps_seconds, labelled with the
// worker's rank, served by an HttpPageServer (not
// civetweb: see http_page_server.h). Thread-safe; `counts` is called from
// the HTTP server's thread and must stay callable until this object is gone.
class WorkerMetrics {
 public:
  // Listens on host:port (port 0 = the OS picks, see port()). UNAVAILABLE
  // when the address cannot be bound, saying "port in use" when it is.
  static absl::StatusOr<std::unique_ptr<WorkerMetrics>> Start(const std::string& host, int port,
                                                              int rank,
                                                              std::function<WorkerCounts()> counts);
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  int port() const;

 private:
  WorkerMetrics() = default;

  std::unique_ptr<HttpPageServer> server_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WORKER_METRICS_H_
