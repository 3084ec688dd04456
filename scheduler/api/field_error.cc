#include "scheduler/api/field_error.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {

absl::Status InvalidField(absl::string_view field, absl::string_view why) {
  if (absl::StartsWith(why, absl::StrCat(field, ": "))) return absl::InvalidArgumentError(why);
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace pagoda::scheduler
