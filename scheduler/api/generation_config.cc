#include "scheduler/api/generation_config.h"

#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sampling_limits.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;

// A generation_config.json is a few hundred bytes; a larger file is not one.
constexpr std::uintmax_t kMaxConfigBytes = 1 << 20;

absl::Status InvalidFile(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
}

// Reads `field` when the file sets it (null counts as unset, as in HF files).
template <typename T>
absl::Status ReadField(const json& config, const char* field, double low, double high,
                       const std::string& path, std::optional<T>& out) {
  if (!config.contains(field) || config[field].is_null()) return absl::OkStatus();
  const bool integral = std::is_integral_v<T>;
  if (!config[field].is_number() || (integral && !config[field].is_number_integer())) {
    return InvalidFile(path, absl::StrCat("field \"", field, "\" must be a number"));
  }
  const double value = config[field].get<double>();
  if (!std::isfinite(value) || value < low || value > high) {
    // An integer field's bounds in full (2147483647, not 2.14748e+09).
    const auto bound = [](double v) {
      return integral ? absl::StrCat(static_cast<int64_t>(v)) : absl::StrCat(v);
    };
    return InvalidFile(path, absl::StrCat("field \"", field, "\" must be in [", bound(low), ", ",
                                          bound(high), "], got ", config[field].dump()));
  }
  out = static_cast<T>(value);
  return absl::OkStatus();
}

// The sampling fields of the JSON object `text`; `source` names it in
// errors. Every default is bounded here, at start-up, by the same ranges
// requests are held to, so a bad file stops the server instead of failing
// requests.
absl::StatusOr<SamplingDefaults> ReadDefaultsJson(const std::string& text,
                                                  const std::string& source) {
  const json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return InvalidFile(source, "not a JSON object");
  SamplingDefaults defaults;
  // top_k -1 is HF's "off" as 0 is ours; top_p 0 means 1 as in requests.
  for (absl::Status status :
       {ReadField(config, "temperature", 0.0, 1e6, source, defaults.temperature),
        ReadField(config, "top_k", -1.0, kMaxSamplingVocab, source, defaults.top_k),
        ReadField(config, "top_p", 0.0, 1.0, source, defaults.top_p),
        ReadField(config, "min_p", 0.0, 1.0, source, defaults.min_p),
        ReadField(config, "repetition_penalty", 0.0, kMaxRepetitionPenalty, source,
                  defaults.repetition_penalty),
        // HF's max_new_tokens is vLLM's max_tokens (as requests, at least 1).
        ReadField(config, "max_new_tokens", 1.0, INT32_MAX, source, defaults.max_tokens)}) {
    if (!status.ok()) return status;
  }
  if (defaults.top_k.has_value() && *defaults.top_k < 0) defaults.top_k = 0;
  return defaults;
}

// generation_config.json at `path`, bounded in size.
absl::StatusOr<SamplingDefaults> ReadDefaults(const std::string& path) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) return InvalidFile(path, absl::StrCat("cannot be read: ", error.message()));
  if (size > kMaxConfigBytes) {
    return InvalidFile(path, absl::StrCat("is ", size, " bytes; at most ", kMaxConfigBytes));
  }
  std::ifstream in(path);
  if (!in) return InvalidFile(path, "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  return ReadDefaultsJson(text.str(), path);
}

constexpr char kOverrideFlag[] = "--override-generation-config";

// --override-generation-config: the JSON object and the fields it sets.
struct Override {
  json object;
  SamplingDefaults fields;
};

absl::StatusOr<Override> ReadOverride(const std::string& override_json) {
  absl::StatusOr<SamplingDefaults> fields = ReadDefaultsJson(override_json, kOverrideFlag);
  if (!fields.ok()) return fields.status();
  return Override{json::parse(override_json), *std::move(fields)};  // Valid: read above.
}

// vLLM's config.update(override) over the six fields: a field the override
// sets replaces the file's, one it sets to null removes it.
SamplingDefaults ApplyOverride(SamplingDefaults defaults, const Override& given) {
  const auto take = [&given](const char* key, auto& field, const auto& value) {
    if (given.object.contains(key)) field = value;
  };
  take("temperature", defaults.temperature, given.fields.temperature);
  take("top_k", defaults.top_k, given.fields.top_k);
  take("top_p", defaults.top_p, given.fields.top_p);
  take("min_p", defaults.min_p, given.fields.min_p);
  take("repetition_penalty", defaults.repetition_penalty, given.fields.repetition_penalty);
  take("max_new_tokens", defaults.max_tokens, given.fields.max_tokens);
  return defaults;
}

absl::StatusOr<SamplingDefaults> LoadFileDefaults(const std::string& mode,
                                                  const std::string& model_dir) {
  if (mode == "vllm") return SamplingDefaults{};
  const std::string dir = mode == "auto" ? model_dir : mode;
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (mode == "auto" && !std::filesystem::exists(path)) return SamplingDefaults{};
  return ReadDefaults(path);
}

}  // namespace

absl::StatusOr<SamplingDefaults> LoadSamplingDefaults(const std::string& mode,
                                                      const std::string& model_dir,
                                                      const std::string& override_json) {
  absl::StatusOr<SamplingDefaults> defaults = LoadFileDefaults(mode, model_dir);
  if (!defaults.ok()) return defaults;
  std::optional<int> override_cap;
  if (!override_json.empty()) {
    absl::StatusOr<Override> given = ReadOverride(override_json);
    if (!given.ok()) return given.status();
    override_cap = given->fields.max_tokens;
    defaults = ApplyOverride(*std::move(defaults), *given);
  }
  // vLLM's override_max_tokens: a directory's max_new_tokens (after the
  // override) caps every request; under auto and vllm only the override's.
  const bool directory = mode != "auto" && mode != "vllm";
  defaults->max_tokens_cap = directory ? defaults->max_tokens : override_cap;
  return defaults;
}

absl::Status CheckSamplingOverride(const std::string& override_json) {
  if (override_json.empty()) return absl::OkStatus();
  return ReadOverride(override_json).status();
}

std::string DescribeSamplingDefaults(const SamplingDefaults& defaults) {
  std::vector<std::string> parts;
  if (defaults.temperature) parts.push_back(absl::StrCat("temperature=", *defaults.temperature));
  if (defaults.top_k) parts.push_back(absl::StrCat("top_k=", *defaults.top_k));
  if (defaults.top_p) parts.push_back(absl::StrCat("top_p=", *defaults.top_p));
  if (defaults.min_p) parts.push_back(absl::StrCat("min_p=", *defaults.min_p));
  if (defaults.repetition_penalty) {
    parts.push_back(absl::StrCat("repetition_penalty=", *defaults.repetition_penalty));
  }
  if (defaults.max_tokens) parts.push_back(absl::StrCat("max_tokens=", *defaults.max_tokens));
  if (defaults.max_tokens_cap) {
    parts.push_back(absl::StrCat("max_tokens_cap=", *defaults.max_tokens_cap));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, " ");
}

}  // namespace pagoda::scheduler
