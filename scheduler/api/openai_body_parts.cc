#include "scheduler/api/openai_body_parts.h"

#include "absl/strings/str_cat.h"
#include "scheduler/api/field_error.h"

namespace pagoda::scheduler::openai_body {
bool Present(const json& body, const char* key) {
  return body.contains(key) && !body[key].is_null();
}

absl::StatusOr<double> Number(const json& body, const char* key, double fallback, double low,
                              double high) {
  if (!Present(body, key)) return fallback;
  if (!body[key].is_number()) return InvalidField(key, "must be a number");
  const double value = body[key].get<double>();
  if (!(value >= low && value <= high)) {
    return InvalidField(key, absl::StrCat("must be in [", low, ", ", high, "], got ", value));
  }
  return value;
}

absl::StatusOr<int64_t> Integer(const json& body, const char* key, int64_t fallback, int64_t low,
                                int64_t high) {
  if (!Present(body, key)) return fallback;
  if (!body[key].is_number_integer()) return InvalidField(key, "must be an integer");
  const int64_t value = body[key].get<int64_t>();
  if (value < low || value > high) {
    return InvalidField(key, absl::StrCat("must be in [", low, ", ", high, "], got ", value));
  }
  return value;
}

absl::StatusOr<bool> Boolean(const json& body, const char* key, bool fallback) {
  if (!Present(body, key)) return fallback;
  if (!body[key].is_boolean()) return InvalidField(key, "must be a boolean");
  return body[key].get<bool>();
}

}  // namespace pagoda::scheduler::openai_body
