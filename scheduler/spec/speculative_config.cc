#include "scheduler/spec/speculative_config.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_fields.h"
#include "common/quantization_methods.h"
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
                                 "num_speculative_tokens_per_batch_size",
                                 "draft_tensor_parallel_size",
                                 "max_model_len",
                                 "quantization"};

absl::Status CheckKeys(const Json& object) {
  // vLLM keeps this key only to say so.
  if (object.contains("tensor_parallel_size")) {
    return Invalid(
        "tensor_parallel_size is not a valid key here; pass draft_tensor_parallel_size instead");
  }
  std::optional<std::string> unknown = json_fields::FirstUnknownKey(object, kKeys);
  if (unknown.has_value()) return Invalid(absl::StrCat("unknown key \"", *unknown, "\""));
  return absl::OkStatus();
}

// The integer under `key`, or nullopt when absent (or null).
absl::StatusOr<std::optional<int>> OptionalInt(const Json& object, const char* key) {
  absl::StatusOr<std::optional<int>> value = json_fields::OptionalInt(object, key);
  if (!value.ok()) return Invalid(value.status().message());
  return value;
}

// The string under `key`; "" when absent (or null).
absl::StatusOr<std::string> OptionalString(const Json& object, const char* key) {
  absl::StatusOr<std::optional<std::string>> value = json_fields::OptionalString(object, key);
  if (!value.ok()) return Invalid(value.status().message());
  return value->value_or("");
}

absl::StatusOr<SpeculativeMethod> MethodNamed(absl::string_view name) {
  for (SpeculativeMethod method : {SpeculativeMethod::kNgram, SpeculativeMethod::kDraftModel,
                                   SpeculativeMethod::kEagle, SpeculativeMethod::kEagle3}) {
    if (name == SpeculativeMethodName(method)) return method;
  }
  return Invalid(
      absl::StrCat("unknown method \"", name, "\" (ngram, draft_model, eagle or eagle3)"));
}

// vLLM's inference of the method from the model when none is named, in
// its order: "eagle-" in the name is EAGLE, else "eagle3" anywhere in it
// (Qwen3-8B_eagle3 too) EAGLE-3, else a draft model.
SpeculativeMethod MethodOfModel(absl::string_view model) {
  if (model == "ngram" || model == "[ngram]") return SpeculativeMethod::kNgram;
  const std::string lower = absl::AsciiStrToLower(model);
  if (absl::StrContains(lower, "eagle-")) return SpeculativeMethod::kEagle;
  if (absl::StrContains(lower, "eagle3")) return SpeculativeMethod::kEagle3;
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

constexpr char kSchedule[] = "num_speculative_tokens_per_batch_size";

// One [first, last, k] entry, its values checked as vLLM's
// validate_and_normalize_dynamic_sd_schedule checks them.
absl::StatusOr<BatchSizeDrafts> ParseScheduleEntry(const Json& entry) {
  if (entry.is_array() && entry.size() == 5) {
    return Invalid(absl::StrCat(kSchedule, ": the 5-item form (with context ranges) is not "
                                           "served; give [first, last, k] entries"));
  }
  int values[3] = {0, 0, 0};
  bool integers = entry.is_array() && entry.size() == 3;
  for (size_t i = 0; integers && i < 3; ++i) {
    integers = entry[i].is_number_integer() && entry[i].get<int64_t>() >= -1'000'000 &&
               entry[i].get<int64_t>() <= std::numeric_limits<int>::max();
    if (integers) values[i] = static_cast<int>(entry[i].get<int64_t>());
  }
  if (!integers) {
    return Invalid(absl::StrCat(kSchedule, ": each entry must be [first, last, k] (integers)"));
  }
  const BatchSizeDrafts range{values[0], values[1], values[2]};
  if (range.first <= 0 || range.last <= 0) {
    return Invalid(absl::StrCat(kSchedule, ": batch-size range (", range.first, ", ", range.last,
                                ") must be positive"));
  }
  if (range.first > range.last) {
    return Invalid(absl::StrCat(kSchedule, ": batch-size range start ", range.first,
                                " must be <= its end ", range.last));
  }
  if (range.k < 0) return Invalid(absl::StrCat(kSchedule, ": k ", range.k, " must be >= 0"));
  return range;
}

// vLLM's dynamic speculative decoding schedule: entries sorted, ranges
// apart, the lowest starting at 1 (so every batch size has a k).
absl::Status ParseBatchSizeSchedule(const Json& object, SpeculativeConfig& config) {
  const auto it = object.find(kSchedule);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array() || it->empty() || it->size() > kMaxBatchSizeScheduleEntries) {
    return Invalid(absl::StrCat(kSchedule, " must be a list of 1 to ",
                                kMaxBatchSizeScheduleEntries, " [first, last, k] entries"));
  }
  std::vector<BatchSizeDrafts> ranges;
  for (const Json& entry : *it) {
    absl::StatusOr<BatchSizeDrafts> range = ParseScheduleEntry(entry);
    if (!range.ok()) return range.status();
    ranges.push_back(*range);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const BatchSizeDrafts& a, const BatchSizeDrafts& b) { return a.first < b.first; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first <= ranges[i - 1].last) {
      return Invalid(absl::StrCat(kSchedule, ": batch-size ranges must not overlap (",
                                  ranges[i - 1].first, "-", ranges[i - 1].last, " and ",
                                  ranges[i].first, "-", ranges[i].last, ")"));
    }
  }
  if (ranges.front().first != 1) {
    return Invalid(absl::StrCat(kSchedule, ": the first batch-size range must start at 1"));
  }
  config.per_batch_size = std::move(ranges);
  return absl::OkStatus();
}

// disable_by_batch_size, or the schedule that replaces it.
absl::Status ParseBatchSizeLimits(const Json& object, SpeculativeConfig& config) {
  auto batch = OptionalInt(object, "disable_by_batch_size");
  if (!batch.ok()) return batch.status();
  if (batch->has_value() && **batch < 2) {
    return Invalid(absl::StrCat("disable_by_batch_size ", **batch, " must be at least 2"));
  }
  if (absl::Status s = ParseBatchSizeSchedule(object, config); !s.ok()) return s;
  if (!config.per_batch_size.empty()) {
    if (batch->has_value()) {
      return Invalid(absl::StrCat("give disable_by_batch_size or ", kSchedule, ", not both"));
    }
    return absl::OkStatus();
  }
  config.disable_by_batch_size = batch->value_or(kDefaultDisableByBatchSize);
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
  auto max_len = OptionalInt(object, "max_model_len");
  if (!max_len.ok()) return max_len.status();
  auto quantization = OptionalString(object, "quantization");
  if (!quantization.ok()) return quantization.status();
  if (!IsServedQuantizationMethod(*quantization)) {
    return Invalid(absl::StrCat("quantization \"", *quantization, "\": Pagoda serves ",
                                kServedQuantizationMethodsText));
  }
  // vLLM: "it only takes effect when using the draft model-based method".
  const bool quantized = !quantization->empty() && *quantization != "auto";
  if (quantized && config.method != SpeculativeMethod::kDraftModel) {
    return Invalid(absl::StrCat("quantization applies to method draft_model, not ",
                                SpeculativeMethodName(config.method)));
  }
  config.quantization = quantized ? *quantization : "";
  const absl::string_view method = SpeculativeMethodName(config.method);
  if (config.method == SpeculativeMethod::kNgram) {
    if (!config.model.empty()) return Invalid("method ngram takes no model");
    if (tp->has_value()) return Invalid("method ngram takes no draft_tensor_parallel_size");
    // vLLM takes it and leaves it unused: prompt lookup has no positions.
    if (max_len->has_value()) return Invalid("method ngram takes no max_model_len");
    return SetPromptLookup(*min, *max, config);
  }
  if (max_len->has_value() && **max_len < 1) {
    return Invalid(absl::StrCat("max_model_len ", **max_len, " must be at least 1"));
  }
  config.max_model_len = *max_len;
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
  if (absl::Status limits = ParseBatchSizeLimits(object, config); !limits.ok()) return limits;
  return config;
}

int SpeculativeTokensFor(const SpeculativeConfig& config, int batch_size) {
  if (config.per_batch_size.empty()) return config.num_speculative_tokens;
  int k = 0;
  for (const BatchSizeDrafts& range : config.per_batch_size) {
    if (range.first > batch_size) break;
    k = range.k;
  }
  return std::min(k, config.num_speculative_tokens);
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
