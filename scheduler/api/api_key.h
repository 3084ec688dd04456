// The --api-key rule of the gRPC services (pagoda.v1 and vLLM's engine API),
// defined once: with a key configured, a call must carry the metadata
// `authorization: Bearer <key>`, compared in constant time.
#ifndef PAGODA_SCHEDULER_API_API_KEY_H_
#define PAGODA_SCHEDULER_API_API_KEY_H_

#include <string>

#include "grpcpp/grpcpp.h"

namespace pagoda::scheduler {

// OK when `api_key` is empty or the call carries it; else UNAUTHENTICATED.
grpc::Status CheckApiKey(const grpc::ServerContextBase& context, const std::string& api_key);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_API_KEY_H_
