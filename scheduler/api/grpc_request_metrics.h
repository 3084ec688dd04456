#ifndef PAGODA_SCHEDULER_API_GRPC_REQUEST_METRICS_H_
#define PAGODA_SCHEDULER_API_GRPC_REQUEST_METRICS_H_

// Per-method request counts and durations of every gRPC call, taken by one
// server interceptor whatever service answers.

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace prometheus {
class Registry;
}

namespace pagoda::scheduler {

// The metrics label of a gRPC status code: its name as gRPC spells it
// ("OK", "INVALID_ARGUMENT", ...); a code outside gRPC's 17 is "UNKNOWN".
std::string GrpcCodeName(grpc::StatusCode code);

// Every call of a gRPC server counted and timed, whatever service answers
// it, in one place: a server interceptor (gRPC's experimental API, stable in
// 1.51's callback and sync servers alike) that sees each call's method when
// it starts and its status when the server sends it. Registers, in
// `registry`:
//   pagoda_grpc_requests_total{method, code}
//   pagoda_grpc_request_duration_seconds{method}
// `method` is "pagoda.v1.Generation/Generate" and so on; the method
// names a client sends are its own choice, so only the methods of the
// services registered on the server are labelled as such and any other
// (answered UNIMPLEMENTED) is `other`: at most (served methods + 1) x 17
// series. `code` is GrpcCodeName's. The duration runs from the call's
// arrival to its status being sent: a stream's whole life, a unary call's
// validation and generation.
//
// Use: Attach(builder) before builder.BuildAndStart(); the interceptor and
// the plugin that learns the served methods keep this object's state alive,
// so it may be destroyed before the server. Thread-safe.
class GrpcRequestMetrics {
 public:
  // REQUIRES: `registry` is not null.
  explicit GrpcRequestMetrics(std::shared_ptr<prometheus::Registry> registry);
  ~GrpcRequestMetrics();
  GrpcRequestMetrics(const GrpcRequestMetrics&) = delete;
  GrpcRequestMetrics& operator=(const GrpcRequestMetrics&) = delete;

  // Sets `builder`'s interceptors (replacing any set before) and adds the
  // plugin that reads the registered services when the server is built.
  // Call once per builder.
  void Attach(grpc::ServerBuilder& builder);

  struct State;  // Opaque outside grpc_request_metrics.cc.

 private:
  std::shared_ptr<State> state_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_GRPC_REQUEST_METRICS_H_
