#ifndef PAGODA_COMMON_JSON_FIELDS_H_
#define PAGODA_COMMON_JSON_FIELDS_H_

// Typed fields of a JSON object given on the command line (vLLM's config
// objects: --speculative-config, --kv-events-config). A null field counts as
// absent, as vLLM's None does. Errors name the key only ("hwm must be an
// integer"); the caller puts its flag's name in front.

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace pagoda::json_fields {

// The first key of `object` not in `known`, or nullopt.
std::optional<std::string> FirstUnknownKey(const nlohmann::json& object,
                                           absl::Span<const char* const> known);

// The int at `key`: INVALID_ARGUMENT when it is not an integer or not an int.
absl::StatusOr<std::optional<int>> OptionalInt(const nlohmann::json& object, const char* key);

absl::StatusOr<std::optional<std::string>> OptionalString(const nlohmann::json& object,
                                                          const char* key);

absl::StatusOr<std::optional<bool>> OptionalBool(const nlohmann::json& object, const char* key);

}  // namespace pagoda::json_fields

#endif  // PAGODA_COMMON_JSON_FIELDS_H_
