#include "common/json_fields.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace pagoda::json_fields {

namespace {

// The field at `key`, or null when it is absent or null.
const nlohmann::json* Present(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

std::optional<std::string> FirstUnknownKey(const nlohmann::json& object,
                                           absl::Span<const char* const> known) {
  for (const auto& [key, value] : object.items()) {
    if (std::none_of(known.begin(), known.end(),
                     [&key = key](const char* name) { return key == name; })) {
      return key;
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<int>> OptionalInt(const nlohmann::json& object, const char* key) {
  const nlohmann::json* field = Present(object, key);
  if (field == nullptr) return std::nullopt;
  if (!field->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be an integer"));
  }
  if (field->is_number_unsigned() &&
      field->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " ", field->get<uint64_t>(), " is out of range"));
  }
  const int64_t value = field->get<int64_t>();
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(key, " ", value, " is out of range"));
  }
  return static_cast<int>(value);
}

absl::StatusOr<std::optional<std::string>> OptionalString(const nlohmann::json& object,
                                                          const char* key) {
  const nlohmann::json* field = Present(object, key);
  if (field == nullptr) return std::nullopt;
  if (!field->is_string())
    return absl::InvalidArgumentError(absl::StrCat(key, " must be a string"));
  return field->get<std::string>();
}

absl::StatusOr<std::optional<bool>> OptionalBool(const nlohmann::json& object, const char* key) {
  const nlohmann::json* field = Present(object, key);
  if (field == nullptr) return std::nullopt;
  if (!field->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(key, " must be true or false"));
  }
  return field->get<bool>();
}

}  // namespace pagoda::json_fields
