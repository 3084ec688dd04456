#include "worker/quant/quant_config.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace pagoda::worker {
namespace {

using Json = nlohmann::json;

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("config.json quantization_config: ", what));
}

// The integer at `key` (or at its alias), `fallback` when neither is there.
absl::StatusOr<int64_t> IntAt(const Json& object, const char* key, const char* alias,
                              int64_t fallback) {
  for (const char* name : {key, alias}) {
    if (name == nullptr || !object.contains(name)) continue;
    const Json& value = object.at(name);
    if (!value.is_number_integer()) return Bad(absl::StrCat(name, " must be an integer"));
    return value.get<int64_t>();
  }
  return fallback;
}

absl::StatusOr<bool> BoolAt(const Json& object, const char* key, bool fallback) {
  if (!object.contains(key) || object.at(key).is_null()) return fallback;
  if (!object.at(key).is_boolean()) return Bad(absl::StrCat(key, " must be true or false"));
  return object.at(key).get<bool>();
}

std::string StringAt(const Json& object, const char* key) {
  return object.contains(key) && object.at(key).is_string() ? object.at(key).get<std::string>()
                                                            : std::string();
}

absl::Status CheckBitsAndGroup(const QuantConfig& config) {
  if (config.bits != 4 && config.bits != 8) {
    return Bad(absl::StrCat("bits ", config.bits, " (4 and 8 are served)"));
  }
  if (config.group_size == 0 || config.group_size < -1) {
    return Bad(absl::StrCat("group_size ", config.group_size, " (a positive size or -1)"));
  }
  return absl::OkStatus();
}

absl::Status ParseAwq(const Json& q, QuantConfig* config) {
  absl::StatusOr<int64_t> bits = IntAt(q, "w_bit", "bits", 4);
  absl::StatusOr<int64_t> group = IntAt(q, "q_group_size", "group_size", 128);
  absl::StatusOr<bool> zero_point = BoolAt(q, "zero_point", true);
  for (const absl::Status& s : {bits.status(), group.status(), zero_point.status()}) {
    if (!s.ok()) return s;
  }
  const std::string version = StringAt(q, "version");
  if (!version.empty() && version != "gemm" && version != "GEMM") {
    return Bad(absl::StrCat("AWQ version \"", version, "\" (the GEMM layout is served)"));
  }
  if (!*zero_point) return Bad("AWQ zero_point false (AWQ with zero points is served)");
  if (*bits != 4) return Bad(absl::StrCat("AWQ bits ", *bits, " (4 is served)"));
  config->bits = static_cast<int>(*bits);
  config->group_size = *group;
  config->symmetric = false;
  if (q.contains("modules_to_not_convert") && q.at("modules_to_not_convert").is_array()) {
    for (const Json& name : q.at("modules_to_not_convert")) {
      if (name.is_string()) config->ignore.push_back(name.get<std::string>());
    }
  }
  return CheckBitsAndGroup(*config);
}

absl::Status ParseGptq(const Json& q, QuantConfig* config) {
  absl::StatusOr<int64_t> bits = IntAt(q, "bits", "w_bit", 4);
  absl::StatusOr<int64_t> group = IntAt(q, "group_size", nullptr, 128);
  absl::StatusOr<bool> sym = BoolAt(q, "sym", true);
  absl::StatusOr<bool> desc_act = BoolAt(q, "desc_act", false);
  absl::StatusOr<bool> lm_head = BoolAt(q, "lm_head", false);
  for (const absl::Status& s :
       {bits.status(), group.status(), sym.status(), desc_act.status(), lm_head.status()}) {
    if (!s.ok()) return s;
  }
  if (*lm_head) return Bad("GPTQ lm_head true (a quantized lm_head is not served yet)");
  std::string format = StringAt(q, "checkpoint_format");
  if (format.empty() && q.contains("meta") && q.at("meta").is_object()) {
    format = StringAt(q.at("meta"), "checkpoint_format");
  }
  if (!format.empty() && format != "gptq" && format != "gptq_v2") {
    return Bad(
        absl::StrCat("GPTQ checkpoint_format \"", format, "\" (gptq and gptq_v2 are served)"));
  }
  config->bits = static_cast<int>(*bits);
  config->group_size = *group;
  config->symmetric = *sym;
  config->desc_act = *desc_act;
  config->gptq_v2 = format == "gptq_v2";
  return CheckBitsAndGroup(*config);
}

// The one weight scheme of config_groups (several groups must agree).
absl::Status ParseCompressedTensors(const Json& q, QuantConfig* config) {
  const std::string global_format = StringAt(q, "format");
  if (!q.contains("config_groups") || !q.at("config_groups").is_object() ||
      q.at("config_groups").empty()) {
    return Bad("compressed-tensors config_groups missing or empty");
  }
  bool first = true;
  for (const auto& [group_name, group] : q.at("config_groups").items()) {
    const std::string where = absl::StrCat("config_groups.", group_name);
    if (!group.is_object() || !group.contains("weights") || !group.at("weights").is_object()) {
      return Bad(absl::StrCat(where, ".weights missing"));
    }
    const std::string format = group.contains("format") ? StringAt(group, "format") : global_format;
    if (format != "pack-quantized") {
      return Bad(absl::StrCat(where, " format \"", format, "\" (pack-quantized is served)"));
    }
    if (group.contains("input_activations") && !group.at("input_activations").is_null()) {
      return Bad(absl::StrCat(where,
                              ".input_activations: activation quantization (W8A8) is not "
                              "served yet"));
    }
    const Json& w = group.at("weights");
    if (StringAt(w, "type") != "int") return Bad(absl::StrCat(where, ".weights.type must be int"));
    absl::StatusOr<int64_t> bits = IntAt(w, "num_bits", nullptr, 0);
    absl::StatusOr<bool> sym = BoolAt(w, "symmetric", true);
    if (!bits.ok()) return bits.status();
    if (!sym.ok()) return sym.status();
    if (!*sym) return Bad(absl::StrCat(where, ": asymmetric weights are not served yet"));
    const std::string strategy = StringAt(w, "strategy");
    int64_t group_size = -1;
    if (strategy == "group") {
      absl::StatusOr<int64_t> size = IntAt(w, "group_size", nullptr, 0);
      if (!size.ok()) return size.status();
      group_size = *size;
      if (group_size <= 0) return Bad(absl::StrCat(where, ".weights.group_size must be positive"));
    } else if (strategy != "channel") {
      return Bad(absl::StrCat(where, ".weights.strategy \"", strategy,
                              "\" (group and channel are served)"));
    }
    const bool desc_act = StringAt(w, "actorder") == "group";
    if (!first && (*bits != config->bits || group_size != config->group_size ||
                   desc_act != config->desc_act)) {
      return Bad(absl::StrCat(where, " differs from the other config_groups"));
    }
    config->bits = static_cast<int>(*bits);
    config->group_size = group_size;
    config->desc_act = desc_act;
    first = false;
  }
  if (q.contains("ignore") && q.at("ignore").is_array()) {
    for (const Json& name : q.at("ignore")) {
      if (name.is_string()) config->ignore.push_back(name.get<std::string>());
    }
  }
  return CheckBitsAndGroup(*config);
}

}  // namespace

bool QuantConfig::Quantizes(const std::string& module) const {
  // vLLM keeps the LM head dense in all three formats (it is no LinearBase).
  if (!quantized() || module == "lm_head") return false;
  for (const std::string& pattern : ignore) {
    if (pattern.rfind("re:", 0) == 0) {
      std::regex re(pattern.substr(3), std::regex::ECMAScript);
      if (std::regex_match(module, re)) return false;
    } else if (module == pattern ||
               (module.size() > pattern.size() &&
                module.compare(module.size() - pattern.size(), pattern.size(), pattern) == 0 &&
                module[module.size() - pattern.size() - 1] == '.')) {
      return false;  // AWQ's modules_to_not_convert names a module's last parts.
    }
  }
  return true;
}

absl::StatusOr<QuantConfig> LoadQuantConfig(const std::string& model_dir) {
  std::ifstream in(std::filesystem::path(model_dir) / "config.json", std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  const Json json = Json::parse(contents.str(), nullptr, /*allow_exceptions=*/false);
  QuantConfig config;
  if (!json.is_object() || !json.contains("quantization_config")) return config;
  const Json& q = json.at("quantization_config");
  if (!q.is_object()) return Bad("must be an object");
  config.method_name = StringAt(q, "quant_method");
  absl::Status status;
  if (config.method_name == "awq") {
    config.method = QuantMethod::kAwq;
    status = ParseAwq(q, &config);
  } else if (config.method_name == "gptq") {
    config.method = QuantMethod::kGptq;
    status = ParseGptq(q, &config);
  } else if (config.method_name == "compressed-tensors") {
    config.method = QuantMethod::kCompressedTensors;
    status = ParseCompressedTensors(q, &config);
  } else {
    return Bad(absl::StrCat("unknown quant_method \"", config.method_name,
                            "\" (awq, gptq and compressed-tensors are served)"));
  }
  if (!status.ok()) return status;
  return config;
}

absl::Status CheckRequestedQuantization(const QuantConfig& config, std::string_view requested) {
  if (requested.empty() || requested == "auto") return absl::OkStatus();
  // A string, not a view: the conditional's value is a temporary copy of
  // method_name, which a view would outlive (a 16+ character name such as
  // "compressed-tensors" then read freed memory and never matched).
  const std::string checkpoint = config.quantized() ? config.method_name : "none";
  bool matches = requested == checkpoint;
  if (config.method == QuantMethod::kAwq) matches |= requested == "awq_marlin";
  if (config.method == QuantMethod::kGptq) matches |= requested == "gptq_marlin";
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat("--quantization ", std::string(requested),
                                                   " does not match the checkpoint's ",
                                                   std::string(checkpoint), " quantization"));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
