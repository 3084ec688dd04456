#include "scheduler/api/generation_config.h"

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
    return InvalidFile(path, absl::StrCat("field \"", field, "\" must be in [", low, ", ", high,
                                      "], got ", config[field].dump()));
  }
  out = static_cast<T>(value);
  return absl::OkStatus();
}

// Every default is bounded here, at start-up, by the same ranges requests
// are held to, so a bad file stops the server instead of failing requests.
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
  const json config = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) return InvalidFile(path, "not a JSON object");
  SamplingDefaults defaults;
  // top_k -1 is HF's "off" as 0 is ours; top_p 0 means 1 as in requests.
  for (absl::Status status :
       {ReadField(config, "temperature", 0.0, 1e6, path, defaults.temperature),
        ReadField(config, "top_k", -1.0, kMaxSamplingVocab, path, defaults.top_k),
        ReadField(config, "top_p", 0.0, 1.0, path, defaults.top_p),
        ReadField(config, "min_p", 0.0, 1.0, path, defaults.min_p),
        ReadField(config, "repetition_penalty", 0.0, kMaxRepetitionPenalty, path,
                  defaults.repetition_penalty)}) {
    if (!status.ok()) return status;
  }
  if (defaults.top_k.has_value() && *defaults.top_k < 0) defaults.top_k = 0;
  return defaults;
}

}  // namespace

absl::StatusOr<SamplingDefaults> LoadSamplingDefaults(const std::string& mode,
                                                      const std::string& model_dir) {
  if (mode == "vllm") return SamplingDefaults{};
  const std::string dir = mode == "auto" ? model_dir : mode;
  const std::string path = (std::filesystem::path(dir) / "generation_config.json").string();
  if (mode == "auto" && !std::filesystem::exists(path)) return SamplingDefaults{};
  return ReadDefaults(path);
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
  return parts.empty() ? "none" : absl::StrJoin(parts, " ");
}

}  // namespace pagoda::scheduler
