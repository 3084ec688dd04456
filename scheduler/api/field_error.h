// How a refused request field is written into an error, and read back out.
#ifndef PAGODA_SCHEDULER_API_FIELD_ERROR_H_
#define PAGODA_SCHEDULER_API_FIELD_ERROR_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pagoda::scheduler {

// How every refusal of a request field reads at the API edge: INVALID_ARGUMENT
// with "field: why". A `why` that already starts with "field: " (the regex and
// grammar parsers name their field themselves) is kept as it is.
absl::Status InvalidField(absl::string_view field, absl::string_view why);

// The request field a refusal's message names as its "field: " prefix (a
// JSON or proto path: "temperature", "messages[0].content",
// "sampling.top_p"), as an OpenAI client knows it: without the gRPC
// request's "sampling." or "stopping." level, which the OpenAI body does not
// have. nullopt when the message starts with no such path. OpenAI error
// bodies carry it as "param".
std::optional<std::string> FieldNamedBy(absl::string_view message);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_FIELD_ERROR_H_
