#include "scheduler/spec/speculative_config.h"

#include <cstdint>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/speculation_limits.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--speculative-config: ", problem));
}

constexpr const char* kKeys[] = {"method",
                                 "model",
                                 "num_speculative_tokens",
                                 "prompt_lookup_max",
                                 "prompt_lookup_min",
                                 "disable_by_batch_size",
                                 "draft_tensor_parallel_size"};

absl::Status CheckKeys(const Json& object) {
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const char* name : kKeys) known = known || key == name;
    if (!known) return Invalid(absl::StrCat("unknown key \"", key, "\""));
  }
  return absl::OkStatus();
}

// The integer under `key`, or nullopt when absent (null counts as absent,
// as vLLM's None).
absl::StatusOr<std::optional<int>> OptionalInt(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return Invalid(absl::StrCat(key, " must be an integer"));
  const int64_t value = it->get<int64_t>();
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    return Invalid(absl::StrCat(key, " ", value, " is out of range"));
  }
  return static_cast<int>(value);
}

absl::StatusOr<std::string> OptionalString(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Invalid(absl::StrCat(key, " must be a string"));
  return it->get<std::string>();
}

absl::StatusOr<SpeculativeMethod> MethodNamed(absl::string_view name) {
  for (SpeculativeMethod method : {SpeculativeMethod::kNgram, SpeculativeMethod::kDraftModel,
                                   SpeculativeMethod::kEagle, SpeculativeMethod::kEagle3}) {
    if (name == SpeculativeMethodName(method)) return method;
  }
  return Invalid(
      absl::StrCat("unknown method \"", name, "\" (ngram, draft_model, eagle or eagle3)"));
}

// vLLM's inference of the method from the model when none is named.
SpeculativeMethod MethodOfModel(absl::string_view model) {
  if (model == "ngram" || model == "[ngram]") return SpeculativeMethod::kNgram;
  const std::string lower = absl::AsciiStrToLower(model);
  if (absl::StrContains(lower, "eagle3-")) return SpeculativeMethod::kEagle3;
  if (absl::StrContains(lower, "eagle-")) return SpeculativeMethod::kEagle;
  return SpeculativeMethod::kDraftModel;
}

// Prompt lookup's bounds: the given ones checked, then vLLM's defaults
// filled in.
absl::Status SetPromptLookup(std::optional<int> min, std::optional<int> max,
                             SpeculativeConfig& config) {
  for (const auto& [name, value] :
       {std::pair{"prompt_lookup_min", min}, std::pair{"prompt_lookup_max", max}}) {
    if (value.has_value() && (*value < 1 || *value > kMaxPromptLookup)) {
      return Invalid(absl::StrCat(name, " ", *value, " must be in [1, ", kMaxPromptLookup, "]"));
    }
  }
  if (!min && !max) min = max = 5;
  if (!min) min = max;
  if (!max) max = min;
  if (*min > *max) {
    return Invalid(absl::StrCat("prompt_lookup_min ", *min, " exceeds prompt_lookup_max ", *max));
  }
  config.prompt_lookup_min = *min;
  config.prompt_lookup_max = *max;
  return absl::OkStatus();
}

// Everything after the method is known: k, the model, the method's own keys.
absl::Status CheckFields(const Json& object, SpeculativeConfig& config) {
  auto k = OptionalInt(object, "num_speculative_tokens");
  if (!k.ok()) return k.status();
  if (!k->has_value()) return Invalid("num_speculative_tokens is required");
  if (**k < 1 || **k > kMaxSpeculativeTokens) {
    return Invalid(absl::StrCat("num_speculative_tokens ", **k, " must be in [1, ",
                                kMaxSpeculativeTokens, "]"));
  }
  config.num_speculative_tokens = **k;
  auto min = OptionalInt(object, "prompt_lookup_min");
  if (!min.ok()) return min.status();
  auto max = OptionalInt(object, "prompt_lookup_max");
  if (!max.ok()) return max.status();
  auto tp = OptionalInt(object, "draft_tensor_parallel_size");
  if (!tp.ok()) return tp.status();
  const absl::string_view method = SpeculativeMethodName(config.method);
  if (config.method == SpeculativeMethod::kNgram) {
    if (!config.model.empty()) return Invalid("method ngram takes no model");
    if (tp->has_value()) return Invalid("method ngram takes no draft_tensor_parallel_size");
    return SetPromptLookup(*min, *max, config);
  }
  if (config.model.empty()) return Invalid(absl::StrCat("method ", method, " needs a model"));
  if (min->has_value() || max->has_value()) {
    return Invalid(absl::StrCat("prompt_lookup_min/max apply to method ngram, not ", method));
  }
  if (tp->has_value() && **tp < 1) {
    return Invalid(absl::StrCat("draft_tensor_parallel_size ", **tp, " must be at least 1"));
  }
  config.draft_tensor_parallel_size = *tp;
  return absl::OkStatus();
}

}  // namespace

absl::string_view SpeculativeMethodName(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::kNgram:
      return "ngram";
    case SpeculativeMethod::kDraftModel:
      return "draft_model";
    case SpeculativeMethod::kEagle:
      return "eagle";
    case SpeculativeMethod::kEagle3:
      return "eagle3";
  }
  return "unknown";
}

absl::StatusOr<SpeculativeConfig> ParseSpeculativeConfig(absl::string_view json) {
  const Json object = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return Invalid("not valid JSON");
  if (!object.is_object()) return Invalid("must be a JSON object");
  if (absl::Status keys = CheckKeys(object); !keys.ok()) return keys;
  SpeculativeConfig config;
  auto model = OptionalString(object, "model");
  if (!model.ok()) return model.status();
  auto method = OptionalString(object, "method");
  if (!method.ok()) return method.status();
  if (!method->empty()) {
    auto named = MethodNamed(*method);
    if (!named.ok()) return named.status();
    config.method = *named;
  } else if (model->empty()) {
    return Invalid("needs a method or a model");
  } else {
    config.method = MethodOfModel(*model);
  }
  // vLLM's legacy spelling of prompt lookup names it as the model.
  const bool ngram_as_model = *model == "ngram" || *model == "[ngram]";
  config.model = config.method == SpeculativeMethod::kNgram && ngram_as_model ? "" : *model;
  if (absl::Status fields = CheckFields(object, config); !fields.ok()) return fields;
  auto batch = OptionalInt(object, "disable_by_batch_size");
  if (!batch.ok()) return batch.status();
  if (batch->has_value() && **batch < 2) {
    return Invalid(absl::StrCat("disable_by_batch_size ", **batch, " must be at least 2"));
  }
  config.disable_by_batch_size = batch->value_or(kDefaultDisableByBatchSize);
  return config;
}

int DraftTensorParallelSize(const SpeculativeConfig& config, int tensor_parallel_size) {
  return config.draft_tensor_parallel_size.value_or(tensor_parallel_size);
}

absl::Status CheckAgainstTarget(const SpeculativeConfig& config, int tensor_parallel_size) {
  const std::optional<int>& tp = config.draft_tensor_parallel_size;
  if (!tp.has_value() || *tp == 1 || *tp == tensor_parallel_size) return absl::OkStatus();
  return Invalid(absl::StrCat("draft_tensor_parallel_size ", *tp, " must be 1 or the target's ",
                              tensor_parallel_size));
}

}  // namespace pagoda::scheduler
