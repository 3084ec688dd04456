// The --api-key rule of every front door, defined once: with a key
// configured, a request must carry `Bearer <key>` (gRPC: the metadata
// `authorization`; HTTP: the Authorization header), compared in constant
// time.
#ifndef PAGODA_SCHEDULER_API_API_KEY_H_
#define PAGODA_SCHEDULER_API_API_KEY_H_

#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace pagoda::scheduler {

// True when `api_key` is empty or `authorization` is "Bearer <api_key>".
bool BearerKeyMatches(absl::string_view api_key, absl::string_view authorization);

// The rule on a gRPC call's metadata: OK, or UNAUTHENTICATED saying where
// the key goes.
grpc::Status CheckApiKey(const grpc::ServerContextBase& context, const std::string& api_key);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_API_KEY_H_
