#ifndef PAGODA_COMMON_YAML_JSON_H_
#define PAGODA_COMMON_YAML_JSON_H_

// One YAML document as JSON, typed as PyYAML's safe_load types it (vLLM
// reads its --config files with it): YAML 1.1's implicit types for plain
// scalars (null ~; bool true/yes/on and false/no/off in their three
// casings; int in decimal, 0b, 0x, 0-octal and base 60, with '_'; float
// with a '.', an exponent only with a sign, .inf and .nan), quoted scalars
// as strings, the !!str/!!int/!!float/!!bool/!!null/!!map/!!seq tags;
// mappings keep their keys' order, a repeated key keeps its first place and
// its last value (a Python dict's update); a plain scalar over 1 KiB stays
// text (PyYAML would type it; no flag value is that long). Parsed with
// libyaml (Debian's libyaml-0-2); only the typing is written here, since
// libyaml reports scalars as text and PyYAML's resolver is Python.
//
// Refused (INVALID_ARGUMENT, naming the line): YAML libyaml cannot parse,
// more than one document, aliases (*NAME), other tags, a mapping key that
// is not a scalar, nesting deeper than 64, an int outside int64, and
// .inf/.nan (JSON has neither).

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pagoda {

// The document in `text`; null when it holds none (an empty file).
absl::StatusOr<nlohmann::ordered_json> ParseYamlDocument(std::string_view text);

}  // namespace pagoda

#endif  // PAGODA_COMMON_YAML_JSON_H_
