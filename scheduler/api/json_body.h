#ifndef PAGODA_SCHEDULER_API_JSON_BODY_H_
#define PAGODA_SCHEDULER_API_JSON_BODY_H_

// JSON from a client (HTTP bodies, a message's tool-call arguments) or a
// model (tool calls in its text), parsed with its nesting bounded.
// nlohmann's parser is iterative, but copying, comparing or converting a
// parsed value recurses once per level: a 600 KB body of nested arrays in
// `tools` overflowed the server's stack. No OpenAI request needs more than
// a few levels (tool parameter schemas nest perhaps ten), and Python's own
// json module stops near a thousand.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler {

// Arrays and objects nested deeper than this are refused.
inline constexpr int kMaxJsonDepth = 64;

// INVALID_ARGUMENT "body: ..." when `text` is not JSON (UTF-8) or nests
// deeper than kMaxJsonDepth.
absl::StatusOr<nlohmann::json> ParseJsonBody(absl::string_view text);
absl::StatusOr<nlohmann::ordered_json> ParseOrderedJsonBody(absl::string_view text);

// The same bound, for text that is JSON only if it parses (tool-call
// arguments, a model's tool calls): a discarded value when it does not or
// is too deep.
nlohmann::ordered_json ParseOrderedJsonOrDiscarded(absl::string_view text);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_JSON_BODY_H_
