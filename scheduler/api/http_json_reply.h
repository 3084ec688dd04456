// How the OpenAI routes write JSON on an exchange: the serialization (bytes
// that are not UTF-8 replaced, never a reason to fail), error responses in
// OpenAI's shape with their mapped status, and server-sent events.
#ifndef PAGODA_SCHEDULER_API_HTTP_JSON_REPLY_H_
#define PAGODA_SCHEDULER_API_HTTP_JSON_REPLY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "scheduler/api/http_exchange.h"
#include "scheduler/api/openai_protocol.h"

namespace pagoda::scheduler {

inline constexpr absl::string_view kJsonContentType = "application/json";

inline std::string DumpJson(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// `status` as OpenAI's error object, with its HTTP status (HttpStatusOf).
inline void RespondError(HttpExchange& exchange, const absl::Status& status) {
  exchange.Respond(HttpStatusOf(status), kJsonContentType, DumpJson(MakeOpenAiError(status)));
}

// One SSE event carrying `data`.
inline std::string SseEvent(const nlohmann::json& data) {
  return absl::StrCat("data: ", DumpJson(data), "\n\n");
}

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_HTTP_JSON_REPLY_H_
