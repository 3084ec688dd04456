#include <optional>
#include <string>

#include "scheduler/api/field_error.h"
#include "scheduler/api/openai_protocol.h"

namespace pagoda::scheduler {

using nlohmann::json;

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnimplemented:  // Unsupported options are the client's to change.
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

json MakeOpenAiError(const absl::Status& status) {
  return MakeOpenAiError(HttpStatusOf(status), std::string(status.message()));
}

json MakeOpenAiError(int http_status, const std::string& message) {
  std::string type = "internal_error";
  if (http_status >= 400 && http_status < 500) type = "invalid_request_error";
  if (http_status == 401 || http_status == 403) type = "authentication_error";
  if (http_status == 429) type = "rate_limit_error";
  if (http_status == 503) type = "service_unavailable";
  // "param": the field a refused request's message names, as OpenAI does.
  json param = nullptr;
  if (type == "invalid_request_error") {
    if (std::optional<std::string> field = FieldNamedBy(message)) param = *field;
  }
  return {
      {"error", {{"message", message}, {"type", type}, {"param", param}, {"code", http_status}}}};
}

}  // namespace pagoda::scheduler
