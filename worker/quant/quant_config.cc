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

void AppendNames(const Json& q, const char* key, std::vector<std::string>* names) {
  if (!q.contains(key) || !q.at(key).is_array()) return;
  for (const Json& name : q.at(key)) {
    if (name.is_string()) names->push_back(name.get<std::string>());
  }
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
  AppendNames(q, "modules_to_not_convert", &config->ignore);
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

// A pack-quantized group's weights (W4A16, W8A16): symmetric int, group or
// channel scales, optional actorder.
absl::Status ParsePackedWeights(const Json& w, const std::string& where, QuantConfig* config) {
  if (StringAt(w, "type") != "int") return Bad(absl::StrCat(where, ".weights.type must be int"));
  absl::StatusOr<int64_t> bits = IntAt(w, "num_bits", nullptr, 0);
  if (!bits.ok()) return bits.status();
  const std::string strategy = StringAt(w, "strategy");
  int64_t group_size = -1;
  if (strategy == "group") {
    absl::StatusOr<int64_t> size = IntAt(w, "group_size", nullptr, 0);
    if (!size.ok()) return size.status();
    group_size = *size;
    if (group_size <= 0) return Bad(absl::StrCat(where, ".weights.group_size must be positive"));
  } else if (strategy != "channel") {
    return Bad(
        absl::StrCat(where, ".weights.strategy \"", strategy, "\" (group and channel are served)"));
  }
  config->bits = static_cast<int>(*bits);
  config->group_size = group_size;
  config->desc_act = StringAt(w, "actorder") == "group";
  return absl::OkStatus();
}

// An int- or float-quantized group's weights: 8-bit, one scale a channel or
// a tensor, of the format's type.
absl::Status ParseByteWeights(const Json& w, const std::string& where, const char* type,
                              QuantConfig* config) {
  if (StringAt(w, "type") != type) {
    return Bad(absl::StrCat(where, ".weights.type must be ", type));
  }
  absl::StatusOr<int64_t> bits = IntAt(w, "num_bits", nullptr, 0);
  if (!bits.ok()) return bits.status();
  if (*bits != 8) return Bad(absl::StrCat(where, ".weights.num_bits ", *bits, " (8 is served)"));
  const std::string strategy = StringAt(w, "strategy");
  if (strategy != "channel" && strategy != "tensor") {
    return Bad(absl::StrCat(where, ".weights.strategy \"", strategy,
                            "\" (channel and tensor are served)"));
  }
  config->bits = 8;
  config->group_size = -1;
  config->per_tensor_scale = strategy == "tensor";
  return absl::OkStatus();
}

// input_activations of an int- or float-quantized group: absent (weights
// only), dynamic per token, or (FP8 only) static per tensor; symmetric.
absl::StatusOr<InputQuant> ParseInputActivations(const Json& group, const std::string& where,
                                                 bool fp8) {
  if (!group.contains("input_activations") || group.at("input_activations").is_null()) {
    return InputQuant::kNone;
  }
  const Json& a = group.at("input_activations");
  const std::string at = absl::StrCat(where, ".input_activations");
  absl::StatusOr<int64_t> bits = IntAt(a, "num_bits", nullptr, 0);
  absl::StatusOr<bool> sym = BoolAt(a, "symmetric", true);
  absl::StatusOr<bool> dynamic = BoolAt(a, "dynamic", false);
  for (const absl::Status& s : {bits.status(), sym.status(), dynamic.status()}) {
    if (!s.ok()) return s;
  }
  const std::string strategy = StringAt(a, "strategy");
  if (StringAt(a, "type") != (fp8 ? "float" : "int") || *bits != 8 || !*sym) {
    return Bad(absl::StrCat(at, ": symmetric 8-bit ", fp8 ? "float" : "int", " is served"));
  }
  if (*dynamic && strategy == "token") {
    return fp8 ? InputQuant::kFp8PerToken : InputQuant::kInt8PerToken;
  }
  if (fp8 && !*dynamic && strategy == "tensor") return InputQuant::kFp8Static;
  return Bad(absl::StrCat(
      at, ": strategy \"", strategy, "\" dynamic ", *dynamic ? "true" : "false",
      fp8 ? " (dynamic token and static tensor are served)" : " (dynamic token is served)"));
}

// One group of config_groups into `scheme`.
absl::Status ParseCompressedGroup(const Json& group, const std::string& where,
                                  const std::string& format, QuantConfig* scheme) {
  if (!group.is_object() || !group.contains("weights") || !group.at("weights").is_object()) {
    return Bad(absl::StrCat(where, ".weights missing"));
  }
  const Json& w = group.at("weights");
  absl::StatusOr<bool> sym = BoolAt(w, "symmetric", true);
  if (!sym.ok()) return sym.status();
  if (!*sym) return Bad(absl::StrCat(where, ": asymmetric weights are not served yet"));
  if (format == "pack-quantized") {
    if (group.contains("input_activations") && !group.at("input_activations").is_null()) {
      return Bad(absl::StrCat(where,
                              ".input_activations: pack-quantized weights with quantized "
                              "activations are not served"));
    }
    return ParsePackedWeights(w, where, scheme);
  }
  // naive-quantized: one code a byte as well, int or float by the weights' type.
  if (format != "int-quantized" && format != "float-quantized" && format != "naive-quantized") {
    return Bad(absl::StrCat(where, " format \"", format,
                            "\" (pack-quantized, int-quantized, float-quantized and "
                            "naive-quantized are served)"));
  }
  const bool fp8 = format == "float-quantized" ||
                   (format == "naive-quantized" && StringAt(w, "type") == "float");
  scheme->packed = false;
  scheme->code_type = fp8 ? CodeType::kFloat8E4M3 : CodeType::kUnsignedInt;
  if (absl::Status s = ParseByteWeights(w, where, fp8 ? "float" : "int", scheme); !s.ok()) return s;
  absl::StatusOr<InputQuant> input = ParseInputActivations(group, where, fp8);
  if (!input.ok()) return input.status();
  scheme->input_quant = *input;
  return absl::OkStatus();
}

bool SameScheme(const QuantConfig& a, const QuantConfig& b) {
  return a.bits == b.bits && a.group_size == b.group_size && a.desc_act == b.desc_act &&
         a.packed == b.packed && a.code_type == b.code_type && a.input_quant == b.input_quant &&
         a.per_tensor_scale == b.per_tensor_scale;
}

// The one scheme of config_groups (several groups must agree).
absl::Status ParseCompressedTensors(const Json& q, QuantConfig* config) {
  const std::string global_format = StringAt(q, "format");
  if (!q.contains("config_groups") || !q.at("config_groups").is_object() ||
      q.at("config_groups").empty()) {
    return Bad("compressed-tensors config_groups missing or empty");
  }
  bool first = true;
  for (const auto& [group_name, group] : q.at("config_groups").items()) {
    const std::string where = absl::StrCat("config_groups.", group_name);
    // A group's own format (a string; null or absent: the global one).
    std::string format = group.is_object() ? StringAt(group, "format") : "";
    if (format.empty()) format = global_format;
    QuantConfig scheme;  // Fresh: every group states its whole scheme.
    scheme.method = config->method;
    scheme.method_name = config->method_name;
    if (absl::Status s = ParseCompressedGroup(group, where, format, &scheme); !s.ok()) return s;
    if (!first && !SameScheme(scheme, *config)) {
      return Bad(absl::StrCat(where, " differs from the other config_groups"));
    }
    *config = std::move(scheme);
    first = false;
  }
  AppendNames(q, "ignore", &config->ignore);
  return CheckBitsAndGroup(*config);
}

// vLLM's fp8: per-tensor E4M3 weights, activation_scheme dynamic or static
// (input_scale); weight_block_size (DeepSeek-style blocks) is refused.
absl::Status ParseFp8(const Json& q, QuantConfig* config) {
  if (q.contains("weight_block_size") && !q.at("weight_block_size").is_null()) {
    return Bad("weight_block_size: block-quantized FP8 (weight_scale_inv) is not served");
  }
  const std::string scheme = StringAt(q, "activation_scheme");
  if (scheme != "dynamic" && scheme != "static") {
    return Bad(absl::StrCat("activation_scheme \"", scheme, "\" (dynamic and static are served)"));
  }
  config->bits = 8;
  config->packed = false;
  config->code_type = CodeType::kFloat8E4M3;
  config->per_tensor_scale = true;
  config->input_quant = scheme == "static" ? InputQuant::kFp8Static : InputQuant::kFp8PerToken;
  AppendNames(q, "ignored_layers", &config->ignore);
  AppendNames(q, "modules_to_not_convert", &config->ignore);
  return absl::OkStatus();
}

}  // namespace

std::string QuantConfig::Describe() const {
  if (!quantized()) return "dense";
  if (packed) return absl::StrCat(method_name, " int", bits, " group ", group_size);
  const char* inputs = "f32 inputs";
  switch (input_quant) {
    case InputQuant::kInt8PerToken:
      inputs = "int8 inputs per token";
      break;
    case InputQuant::kFp8PerToken:
      inputs = "FP8 inputs per token";
      break;
    case InputQuant::kFp8Static:
      inputs = "FP8 inputs, static scale";
      break;
    case InputQuant::kNone:
      break;
  }
  return absl::StrCat(method == QuantMethod::kOnlineFp8 ? "online " : "", method_name, " ",
                      code_type == CodeType::kFloat8E4M3 ? "FP8 E4M3" : "int8", " weights per ",
                      per_tensor_scale ? "tensor" : "channel", ", ", inputs);
}

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
  } else if (config.method_name == "fp8") {
    config.method = QuantMethod::kFp8;
    status = ParseFp8(q, &config);
  } else {
    return Bad(absl::StrCat("unknown quant_method \"", config.method_name,
                            "\" (awq, gptq, compressed-tensors and fp8 are served)"));
  }
  if (!status.ok()) return status;
  return config;
}

absl::Status CheckRequestedQuantization(QuantConfig* config_out, std::string_view requested,
                                        std::string_view source) {
  if (requested.empty() || requested == "auto") return absl::OkStatus();
  if (requested == "fp8" && !config_out->quantized()) {
    // vLLM's Fp8Config for an unquantized checkpoint: per-tensor E4M3
    // weights made at load, dynamic activation scales.
    config_out->method = QuantMethod::kOnlineFp8;
    config_out->method_name = "fp8";
    config_out->bits = 8;
    config_out->packed = false;
    config_out->code_type = CodeType::kFloat8E4M3;
    config_out->per_tensor_scale = true;
    config_out->input_quant = InputQuant::kFp8PerToken;
    return absl::OkStatus();
  }
  const QuantConfig& config = *config_out;
  // A string, not a view: the conditional's value is a temporary copy of
  // method_name, which a view would outlive (a 16+ character name such as
  // "compressed-tensors" then read freed memory and never matched).
  const std::string checkpoint = config.quantized() ? config.method_name : "none";
  bool matches = requested == checkpoint;
  if (config.method == QuantMethod::kAwq) matches |= requested == "awq_marlin";
  if (config.method == QuantMethod::kGptq) matches |= requested == "gptq_marlin";
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), " ", std::string(requested),
                                                   " does not match the checkpoint's ",
                                                   std::string(checkpoint), " quantization"));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
