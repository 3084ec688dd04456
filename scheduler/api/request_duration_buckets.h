// The buckets of the front doors' request-duration histograms (HTTP's
// pagoda_http_request_duration_seconds, gRPC's
// pagoda_grpc_request_duration_seconds), defined once so that the two can be
// compared bucket by bucket: 1 ms (a health check, a refusal) to 2 minutes (a
// long stream).
#ifndef PAGODA_SCHEDULER_API_REQUEST_DURATION_BUCKETS_H_
#define PAGODA_SCHEDULER_API_REQUEST_DURATION_BUCKETS_H_

#include <vector>

namespace pagoda::scheduler {

inline std::vector<double> RequestDurationBucketsSeconds() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_DURATION_BUCKETS_H_
