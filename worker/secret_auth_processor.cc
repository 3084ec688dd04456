#include "worker/secret_auth_processor.h"

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "wire/worker_secret.h"

namespace pagoda::worker {
namespace {

absl::string_view View(grpc::string_ref ref) { return absl::string_view(ref.data(), ref.size()); }

}  // namespace

grpc::Status SecretAuthProcessor::Process(const InputMetadata& auth_metadata,
                                          grpc::AuthContext* context,
                                          OutputMetadata* consumed_auth_metadata,
                                          OutputMetadata* response_metadata) {
  if (const auto path = auth_metadata.find(":path");
      path != auth_metadata.end() &&
      absl::StartsWith(View(path->second), "/grpc.health.v1.Health/")) {
    return grpc::Status::OK;
  }
  std::optional<absl::string_view> presented;
  if (const auto found = auth_metadata.find(kWorkerSecretMetadataKey);
      found != auth_metadata.end()) {
    presented = View(found->second);
  }
  if (!service_->HasSecret(presented, "a caller refused before its message was read")) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, WorkerService::kRefusalMessage);
  }
  return grpc::Status::OK;
}

}  // namespace pagoda::worker
