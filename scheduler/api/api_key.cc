#include "scheduler/api/api_key.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "wire/worker_secret.h"

namespace pagoda::scheduler {

grpc::Status CheckApiKey(const grpc::ServerContextBase& context, const std::string& api_key) {
  if (api_key.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  const std::string expected = absl::StrCat("Bearer ", api_key);
  if (found == metadata.end() ||
      !ConstantTimeEquals(expected,
                          absl::string_view(found->second.data(), found->second.size()))) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong API key: send metadata 'authorization: Bearer <key>'");
  }
  return grpc::Status::OK;
}

}  // namespace pagoda::scheduler
