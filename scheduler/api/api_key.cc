#include "scheduler/api/api_key.h"

#include "absl/strings/str_cat.h"
#include "wire/worker_secret.h"

namespace pagoda::scheduler {

bool BearerKeyMatches(absl::string_view api_key, absl::string_view authorization) {
  if (api_key.empty()) return true;
  return ConstantTimeEquals(absl::StrCat("Bearer ", api_key), authorization);
}

grpc::Status CheckApiKey(const grpc::ServerContextBase& context, const std::string& api_key) {
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  const absl::string_view sent =
      found == metadata.end() ? absl::string_view()
                              : absl::string_view(found->second.data(), found->second.size());
  if (BearerKeyMatches(api_key, sent)) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong API key: send metadata 'authorization: Bearer <key>'");
}

}  // namespace pagoda::scheduler
