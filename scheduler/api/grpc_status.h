// The one mapping of the API's absl::Status to the gRPC status a client
// sees, for both gRPC services (pagoda.v1 and vLLM's engine API).
#ifndef PAGODA_SCHEDULER_API_GRPC_STATUS_H_
#define PAGODA_SCHEDULER_API_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace pagoda::scheduler {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_GRPC_STATUS_H_
