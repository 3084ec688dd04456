#ifndef PAGODA_COMMON_GRPC_HEALTH_H_
#define PAGODA_COMMON_GRPC_HEALTH_H_

// A client of grpc.health.v1.Health for the CLI and the tests, written against the wire format because Debian's gRPC ships no
// generated health stubs.

#include <memory>

#include "grpcpp/grpcpp.h"

namespace pagoda {

// grpc.health.v1.Health/Check of a whole server (service "") over `channel`,
// with `context`'s deadline and metadata. Debian's gRPC ships no generated
// health code, so the messages go as their wire twins: the request
// {service: ""} encodes as google.protobuf.Empty, and the response's enum
// field 1 as Int32Value's field 1. Returns the call's status; when OK,
// *serving_status is the answer (0 UNKNOWN, 1 SERVING, 2 NOT_SERVING,
// 3 SERVICE_UNKNOWN).
grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                         grpc::ClientContext& context, int* serving_status);

// The name of a serving status, or "UNRECOGNIZED".
const char* HealthStatusName(int serving_status);

}  // namespace pagoda

#endif  // PAGODA_COMMON_GRPC_HEALTH_H_
