#include "scheduler/api/field_error.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace pagoda::scheduler {

absl::Status InvalidField(absl::string_view field, absl::string_view why) {
  if (absl::StartsWith(why, absl::StrCat(field, ": "))) return absl::InvalidArgumentError(why);
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

namespace {

// Whether `path` is a field path: names joined by '.', each name
// [A-Za-z_][A-Za-z0-9_]* and followed by any number of [<digits>] indexes.
bool IsFieldPath(absl::string_view path) {
  bool expect_name = true;
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (expect_name) {
      if (!absl::ascii_isalpha(c) && c != '_') return false;
      while (i + 1 < path.size() && (absl::ascii_isalnum(path[i + 1]) || path[i + 1] == '_')) ++i;
      expect_name = false;
    } else if (c == '.') {
      expect_name = true;
    } else if (c == '[') {
      const size_t close = path.find(']', i);
      if (close == absl::string_view::npos || close == i + 1) return false;
      for (size_t d = i + 1; d < close; ++d) {
        if (!absl::ascii_isdigit(path[d])) return false;
      }
      i = close;
    } else {
      return false;
    }
  }
  return !path.empty() && !expect_name;
}

}  // namespace

std::optional<std::string> FieldNamedBy(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos) return std::nullopt;
  absl::string_view path = message.substr(0, colon);
  if (!IsFieldPath(path)) return std::nullopt;
  for (absl::string_view level : {"sampling.", "stopping."}) {
    if (absl::ConsumePrefix(&path, level)) break;
  }
  return std::string(path);
}

}  // namespace pagoda::scheduler
