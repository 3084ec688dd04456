#include "common/lora_adapter_config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pagoda {
namespace {

using Json = nlohmann::json;

constexpr std::array<absl::string_view, kNumLoraModules> kModuleNames = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

absl::Status ConfigError(const std::string& source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
}

// True when `key` is absent, null, false, empty, or "none" (for bias).
bool IsUnset(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return true;
  if (it->is_boolean()) return !it->get<bool>();
  if (it->is_string()) return it->get<std::string>() == "none" || it->get<std::string>().empty();
  if (it->is_array() || it->is_object()) return it->empty();
  return false;
}

// What vLLM refuses too, and what Pagoda cannot apply.
absl::Status CheckUnsupportedKeys(const Json& config, const std::string& source) {
  struct Refusal {
    const char* key;
    const char* why;
  };
  static constexpr Refusal kRefusals[] = {
      {"use_dora", "DoRA (use_dora) is not supported"},
      {"bias", "adapter bias (bias other than \"none\") is not supported"},
      {"lora_bias", "lora_bias is not supported"},
      {"modules_to_save", "modules_to_save (fully trained modules) is not supported"},
      {"fan_in_fan_out", "fan_in_fan_out (Conv1D weights) is not supported"},
      {"rank_pattern", "a per-module rank_pattern is not supported"},
      {"alpha_pattern", "a per-module alpha_pattern is not supported"},
      {"layer_replication", "layer_replication is not supported"},
  };
  for (const Refusal& refusal : kRefusals) {
    if (!IsUnset(config, refusal.key)) return ConfigError(source, refusal.why);
  }
  auto type = config.find("peft_type");
  if (type != config.end() && !(type->is_string() && type->get<std::string>() == "LORA")) {
    return ConfigError(source, "peft_type must be \"LORA\"");
  }
  return absl::OkStatus();
}

absl::Status ParseRankAndAlpha(const Json& config, const std::string& source, int max_rank,
                               LoraAdapterConfig* out) {
  auto r = config.find("r");
  if (r == config.end() || !r->is_number_integer()) {
    return ConfigError(source, "\"r\" (the rank) must be an integer");
  }
  const int64_t rank = r->get<int64_t>();
  if (rank < 1 || rank > max_rank) {
    return ConfigError(source, absl::StrCat("LoRA rank ", rank, " is outside [1, ", max_rank,
                                            "] (--max-lora-rank)"));
  }
  out->rank = static_cast<int>(rank);
  auto alpha = config.find("lora_alpha");
  if (alpha == config.end() || !alpha->is_number() || !std::isfinite(alpha->get<double>())) {
    return ConfigError(source, "\"lora_alpha\" must be a finite number");
  }
  out->alpha = alpha->get<double>();
  auto rslora = config.find("use_rslora");
  if (rslora != config.end() && !rslora->is_null()) {
    if (!rslora->is_boolean()) return ConfigError(source, "\"use_rslora\" must be a boolean");
    out->use_rslora = rslora->get<bool>();
  }
  return absl::OkStatus();
}

absl::Status ParseTargets(const Json& config, const std::string& source, LoraAdapterConfig* out) {
  auto targets = config.find("target_modules");
  if (targets == config.end() || targets->is_null()) {
    return ConfigError(source, "\"target_modules\" is missing");
  }
  if (targets->is_string()) {
    out->targets_from_tensors = true;  // A regex or "all-linear": the tensors decide.
    return absl::OkStatus();
  }
  if (!targets->is_array() || targets->empty()) {
    return ConfigError(source, "\"target_modules\" must be a non-empty list or a string");
  }
  for (const Json& target : *targets) {
    if (!target.is_string()) return ConfigError(source, "\"target_modules\" holds a non-string");
    const std::string name = target.get<std::string>();
    if (name == kLoraEmbedTokens || name == kLoraLmHead) {
      (name == kLoraEmbedTokens ? out->embed_tokens : out->lm_head) = true;
      continue;
    }
    std::optional<LoraModule> module = FindLoraModule(name);
    if (!module) {
      return ConfigError(source, absl::StrCat("target module \"", name.substr(0, 64),
                                              "\" is not one of q/k/v/o/gate/up/down_proj, ",
                                              kLoraEmbedTokens, " or ", kLoraLmHead));
    }
    if (std::find(out->targets.begin(), out->targets.end(), *module) == out->targets.end()) {
      out->targets.push_back(*module);
    }
  }
  return absl::OkStatus();
}

absl::Status ParseLayers(const Json& config, const std::string& source, LoraAdapterConfig* out) {
  auto layers = config.find("layers_to_transform");
  if (layers == config.end() || layers->is_null()) return absl::OkStatus();
  if (layers->is_number_integer()) {
    out->layers.push_back(layers->get<int>());
  } else if (layers->is_array()) {
    for (const Json& layer : *layers) {
      if (!layer.is_number_integer()) {
        return ConfigError(source, "\"layers_to_transform\" holds a non-integer");
      }
      out->layers.push_back(layer.get<int>());
    }
  } else {
    return ConfigError(source, "\"layers_to_transform\" must be an integer or a list");
  }
  return absl::OkStatus();
}

// One module's list of trainable_token_indices: non-empty, unique,
// non-negative int32 ids, at most `max_tokens` of them (vLLM's checks).
absl::StatusOr<std::vector<int32_t>> ParseTokenIds(const Json& list, const std::string& source,
                                                   int max_tokens) {
  static constexpr char kShape[] =
      "\"trainable_token_indices\" must hold non-empty lists of unique non-negative token ids";
  if (!list.is_array() || list.empty()) return ConfigError(source, kShape);
  if (list.size() > static_cast<size_t>(max_tokens)) {
    return ConfigError(source, absl::StrCat("adapter needs ", list.size(),
                                            " trainable tokens per module, above "
                                            "--max-lora-trainable-tokens ",
                                            max_tokens));
  }
  std::vector<int32_t> ids;
  for (const Json& id : list) {
    const bool in_range = id.is_number_unsigned()
                              ? id.get<uint64_t>() <= std::numeric_limits<int32_t>::max()
                              : id.is_number_integer() && id.get<int64_t>() >= 0 &&
                                    id.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!in_range) return ConfigError(source, kShape);
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  std::vector<int32_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return ConfigError(source, kShape);
  }
  return ids;
}

// Which list a trainable_token_indices key fills: PEFT matches a module by
// its name's end ("embed_tokens", "model.embed_tokens"); null for others.
std::vector<int32_t>* TokenIdsOf(absl::string_view key, LoraAdapterConfig* out) {
  for (const auto& [name, ids] : {std::pair{absl::string_view(kLoraEmbedTokens),
                                            &out->embed_token_ids},
                                  std::pair{absl::string_view(kLoraLmHead),
                                            &out->lm_head_token_ids}}) {
    if (key == name || absl::EndsWith(key, absl::StrCat(".", name))) return ids;
  }
  return nullptr;
}

absl::Status ParseTrainableTokens(const Json& config, const std::string& source, int max_tokens,
                                  LoraAdapterConfig* out) {
  auto indices = config.find("trainable_token_indices");
  if (indices == config.end() || indices->is_null()) return absl::OkStatus();
  if (!indices->is_object()) {  // A plain list names the input embedding's tokens.
    auto ids = ParseTokenIds(*indices, source, max_tokens);
    if (!ids.ok()) return ids.status();
    out->embed_token_ids = *std::move(ids);
    return absl::OkStatus();
  }
  if (indices->empty()) {
    return ConfigError(source, "\"trainable_token_indices\" must name at least one module");
  }
  for (const auto& [key, list] : indices->items()) {
    std::vector<int32_t>* target = TokenIdsOf(key, out);
    if (target == nullptr || !target->empty()) {
      return ConfigError(source, absl::StrCat("\"trainable_token_indices\" names module \"",
                                              key.substr(0, 64), "\"; only ", kLoraEmbedTokens,
                                              " and ", kLoraLmHead, ", once each, take them"));
    }
    auto ids = ParseTokenIds(list, source, max_tokens);
    if (!ids.ok()) return ids.status();
    *target = *std::move(ids);
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view LoraModuleName(LoraModule module) {
  return kModuleNames[static_cast<int>(module)];
}

std::optional<LoraModule> FindLoraModule(absl::string_view name) {
  for (LoraModule module : kAllLoraModules) {
    if (LoraModuleName(module) == name) return module;
  }
  return std::nullopt;
}

absl::string_view LoraModuleParent(LoraModule module) {
  return static_cast<int>(module) <= static_cast<int>(LoraModule::kO) ? "self_attn" : "mlp";
}

LinearShape LoraModuleShape(const ModelConfig& base, LoraModule module) {
  const int64_t hidden = base.hidden_size;
  const int64_t q = static_cast<int64_t>(base.num_attention_heads) * base.head_dim;
  const int64_t kv = static_cast<int64_t>(base.num_key_value_heads) * base.head_dim;
  const int64_t inter = base.intermediate_size;
  switch (module) {
    case LoraModule::kQ:
      return {q, hidden};
    case LoraModule::kK:
    case LoraModule::kV:
      return {kv, hidden};
    case LoraModule::kO:
      return {hidden, q};
    case LoraModule::kGate:
    case LoraModule::kUp:
      return {inter, hidden};
    case LoraModule::kDown:
      return {hidden, inter};
  }
  return {};
}

double LoraAdapterConfig::Scale() const {
  return use_rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank;
}

absl::StatusOr<LoraAdapterConfig> ParseLoraAdapterConfig(absl::string_view json_text,
                                                         const std::string& source, int max_rank,
                                                         int max_trainable_tokens) {
  Json config = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return ConfigError(source, "not a JSON object");
  }
  LoraAdapterConfig out;
  if (absl::Status s = CheckUnsupportedKeys(config, source); !s.ok()) return s;
  if (absl::Status s = ParseRankAndAlpha(config, source, max_rank, &out); !s.ok()) return s;
  if (absl::Status s = ParseTargets(config, source, &out); !s.ok()) return s;
  if (absl::Status s = ParseLayers(config, source, &out); !s.ok()) return s;
  if (absl::Status s = ParseTrainableTokens(config, source, max_trainable_tokens, &out); !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace pagoda
