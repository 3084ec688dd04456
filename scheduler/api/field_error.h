#ifndef PAGODA_SCHEDULER_API_FIELD_ERROR_H_
#define PAGODA_SCHEDULER_API_FIELD_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace pagoda::scheduler {

// How every refusal of a request field reads at the API edge: INVALID_ARGUMENT
// with "field: why". A `why` that already starts with "field: " (the regex and
// grammar parsers name their field themselves) is kept as it is.
absl::Status InvalidField(absl::string_view field, absl::string_view why);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_FIELD_ERROR_H_
