#include "common/model_config.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sampling_limits.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace pagoda {
namespace {

using Json = nlohmann::json;

// Reads and parses one JSON object file. `label` is how errors name the file.
absl::StatusOr<Json> ReadJsonObject(const std::filesystem::path& path, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat(label, ": cannot open ", path.string(), ": ", std::strerror(errno)));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(label, ": read error"));
  Json json = Json::parse(contents.str(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not valid JSON"));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": top level must be a JSON object"));
  }
  return json;
}

// Field readers for one JSON object; every error names the file and the field.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string label) : object_(object), label_(std::move(label)) {}

  bool Present(const std::string& field) const {
    auto it = object_.find(field);
    return it != object_.end() && !it->is_null();
  }

  absl::Status Error(const std::string& field, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(label_, ": field \"", field, "\" ", what));
  }

  absl::StatusOr<int> PositiveInt(const std::string& field) const {
    if (!Present(field)) return Error(field, "is required (a positive integer)");
    const Json& value = object_.at(field);
    if (!value.is_number_integer() || value.get<int64_t>() <= 0 ||
        value.get<int64_t>() > std::numeric_limits<int>::max()) {
      return Error(field, "must be a positive integer");
    }
    return static_cast<int>(value.get<int64_t>());
  }

  absl::StatusOr<int> OptionalPositiveInt(const std::string& field, int fallback) const {
    if (!Present(field)) return fallback;
    return PositiveInt(field);
  }

  absl::StatusOr<double> OptionalPositiveNumber(const std::string& field, double fallback) const {
    if (!Present(field)) return fallback;
    const Json& value = object_.at(field);
    if (!value.is_number() || !(value.get<double>() > 0) || !std::isfinite(value.get<double>())) {
      return Error(field, "must be a positive number");
    }
    return value.get<double>();
  }

  absl::StatusOr<bool> OptionalBool(const std::string& field, bool fallback) const {
    if (!Present(field)) return fallback;
    const Json& value = object_.at(field);
    if (!value.is_boolean()) return Error(field, "must be true or false");
    return value.get<bool>();
  }

  absl::StatusOr<std::string> OptionalString(const std::string& field) const {
    if (!Present(field)) return std::string();
    const Json& value = object_.at(field);
    if (!value.is_string()) return Error(field, "must be a string");
    return value.get<std::string>();
  }

  // A token id: non-negative integer. Absent or null gives nullopt.
  absl::StatusOr<std::optional<int>> OptionalTokenId(const std::string& field) const {
    if (!Present(field)) return std::nullopt;
    const Json& value = object_.at(field);
    if (!IsTokenId(value)) return Error(field, "must be a non-negative integer");
    return static_cast<int>(value.get<int64_t>());
  }

  // An int or a list of ints. Absent or null gives nullopt.
  absl::StatusOr<std::optional<std::vector<int>>> OptionalTokenIds(const std::string& field) const {
    if (!Present(field)) return std::nullopt;
    const Json& value = object_.at(field);
    std::vector<int> ids;
    if (IsTokenId(value)) {
      ids.push_back(static_cast<int>(value.get<int64_t>()));
    } else if (value.is_array()) {
      for (const Json& element : value) {
        if (!IsTokenId(element)) {
          return Error(field, "must be a non-negative integer or a list of them");
        }
        ids.push_back(static_cast<int>(element.get<int64_t>()));
      }
    } else {
      return Error(field, "must be a non-negative integer or a list of them");
    }
    return ids;
  }

  const Json& object() const { return object_; }
  const std::string& label() const { return label_; }

 private:
  static bool IsTokenId(const Json& value) {
    return value.is_number_integer() && value.get<int64_t>() >= 0 &&
           value.get<int64_t>() <= std::numeric_limits<int>::max();
  }

  const Json& object_;
  std::string label_;
};

absl::StatusOr<RopeScaling> ParseRopeScaling(const FieldReader& config) {
  RopeScaling scaling;
  if (!config.Present("rope_scaling")) return scaling;
  const Json& value = config.object().at("rope_scaling");
  if (!value.is_object()) return config.Error("rope_scaling", "must be an object or null");
  // Hugging Face renamed "type" to "rope_type"; accept either.
  FieldReader reader(value, config.label() + ": rope_scaling");
  std::string type_field = reader.Present("rope_type") ? "rope_type" : "type";
  if (!reader.Present(type_field)) {
    return config.Error("rope_scaling", "needs \"rope_type\" (\"linear\" or \"llama3\")");
  }
  auto type = reader.OptionalString(type_field);
  if (!type.ok()) return type.status();
  if (*type == "default") return scaling;
  if (*type == "linear") {
    scaling.type = RopeScaling::Type::kLinear;
  } else if (*type == "llama3") {
    scaling.type = RopeScaling::Type::kLlama3;
  } else {
    return absl::UnimplementedError(absl::StrCat(config.label(),
                                                 ": field \"rope_scaling\" has unsupported type \"",
                                                 *type, "\" (supported: linear, llama3)"));
  }
  if (!reader.Present("factor")) return reader.Error("factor", "is required");
  auto factor = reader.OptionalPositiveNumber("factor", 1.0);
  if (!factor.ok()) return factor.status();
  scaling.factor = *factor;
  if (scaling.type == RopeScaling::Type::kLlama3) {
    auto low = reader.OptionalPositiveNumber("low_freq_factor", scaling.low_freq_factor);
    if (!low.ok()) return low.status();
    auto high = reader.OptionalPositiveNumber("high_freq_factor", scaling.high_freq_factor);
    if (!high.ok()) return high.status();
    auto original = reader.OptionalPositiveInt("original_max_position_embeddings",
                                               scaling.original_max_position_embeddings);
    if (!original.ok()) return original.status();
    if (!(*high > *low)) {
      return reader.Error("high_freq_factor", "must be greater than \"low_freq_factor\"");
    }
    scaling.low_freq_factor = *low;
    scaling.high_freq_factor = *high;
    scaling.original_max_position_embeddings = *original;
  }
  return scaling;
}

absl::Status CheckArchitecture(const FieldReader& config, ModelConfig& model) {
  const Json& object = config.object();
  if (!config.Present("architectures") || !object.at("architectures").is_array() ||
      object.at("architectures").size() != 1 || !object.at("architectures")[0].is_string()) {
    return config.Error("architectures", "must be a list holding one architecture name");
  }
  model.architecture = object.at("architectures")[0].get<std::string>();
  if (model.architecture == "LlamaForCausalLM" || model.architecture == "Qwen2ForCausalLM") {
    return absl::OkStatus();
  }
  // EAGLE-3 heads' names (EAGLE's own and vLLM's): Llama configs that only
  // LlamaModel::LoadEagle3Head loads (LlamaModel::Load refuses them).
  if (model.architecture == "LlamaForCausalLMEagle3" ||
      model.architecture == "Eagle3LlamaForCausalLM") {
    return absl::OkStatus();
  }
  if (model.architecture == "MistralForCausalLM") {
    // Mistral is Llama unless a sliding window actually limits attention.
    if (config.Present("sliding_window")) {
      const Json& window = object.at("sliding_window");
      if (!window.is_number_integer() || window.get<int64_t>() <= 0) {
        return config.Error("sliding_window", "must be a positive integer or null");
      }
      if (window.get<int64_t>() < model.max_position_embeddings) {
        return absl::UnimplementedError(absl::StrCat(
            config.label(), ": field \"sliding_window\" (", window.get<int64_t>(),
            ") is smaller than max_position_embeddings; sliding-window attention is not "
            "supported"));
      }
    }
    model.architecture = "LlamaForCausalLM";
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(config.label(), ": field \"architectures\" names unsupported architecture \"",
                   model.architecture,
                   "\" (supported: LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM)"));
}

// Options of real configs that change the computation in ways the Llama
// model does not implement: refuse them rather than produce wrong outputs.
absl::Status CheckUnsupportedOptions(const FieldReader& config, const std::string& architecture) {
  auto activation = config.OptionalString("hidden_act");
  if (!activation.ok()) return activation.status();
  if (!activation->empty() && *activation != "silu") {
    return absl::UnimplementedError(absl::StrCat(config.label(), ": field \"hidden_act\" is \"",
                                                 *activation, "\"; only \"silu\" is supported"));
  }
  auto mlp_bias = config.OptionalBool("mlp_bias", false);
  if (!mlp_bias.ok()) return mlp_bias.status();
  if (*mlp_bias) {
    return absl::UnimplementedError(
        absl::StrCat(config.label(), ": field \"mlp_bias\" = true is not supported"));
  }
  if (architecture == "Qwen2ForCausalLM") {
    auto sliding = config.OptionalBool("use_sliding_window", false);
    if (!sliding.ok()) return sliding.status();
    if (*sliding) {
      return absl::UnimplementedError(absl::StrCat(
          config.label(),
          ": field \"use_sliding_window\" = true is not supported (sliding-window attention)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseConfig(const FieldReader& config) {
  ModelConfig model;
  PAGODA_ASSIGN_OR_RETURN(model.vocab_size, config.PositiveInt("vocab_size"));
  if (model.vocab_size > kMaxSamplingVocab) {
    return absl::InvalidArgumentError(absl::StrCat(config.label(), ": field \"vocab_size\" (",
                                                   model.vocab_size, ") is above ",
                                                   kMaxSamplingVocab, ", the samplers' limit"));
  }
  PAGODA_ASSIGN_OR_RETURN(model.hidden_size, config.PositiveInt("hidden_size"));
  PAGODA_ASSIGN_OR_RETURN(model.intermediate_size, config.PositiveInt("intermediate_size"));
  PAGODA_ASSIGN_OR_RETURN(model.num_hidden_layers, config.PositiveInt("num_hidden_layers"));
  PAGODA_ASSIGN_OR_RETURN(model.num_attention_heads, config.PositiveInt("num_attention_heads"));
  PAGODA_ASSIGN_OR_RETURN(
      model.num_key_value_heads,
      config.OptionalPositiveInt("num_key_value_heads", model.num_attention_heads));
  PAGODA_ASSIGN_OR_RETURN(model.max_position_embeddings,
                          config.PositiveInt("max_position_embeddings"));
  absl::Status architecture = CheckArchitecture(config, model);
  if (!architecture.ok()) return architecture;
  absl::Status options = CheckUnsupportedOptions(config, model.architecture);
  if (!options.ok()) return options;

  if (model.num_attention_heads % model.num_key_value_heads != 0) {
    return config.Error(
        "num_key_value_heads",
        absl::StrCat("(", model.num_key_value_heads, ") must divide \"num_attention_heads\" (",
                     model.num_attention_heads, ")"));
  }
  if (config.Present("head_dim")) {
    PAGODA_ASSIGN_OR_RETURN(model.head_dim, config.PositiveInt("head_dim"));
  } else {
    if (model.hidden_size % model.num_attention_heads != 0) {
      return config.Error("hidden_size",
                          "must be a multiple of \"num_attention_heads\" when \"head_dim\" is "
                          "absent");
    }
    model.head_dim = model.hidden_size / model.num_attention_heads;
  }
  if (model.head_dim % 2 != 0) return config.Error("head_dim", "must be even (rotary embedding)");

  PAGODA_ASSIGN_OR_RETURN(model.rms_norm_eps,
                          config.OptionalPositiveNumber("rms_norm_eps", model.rms_norm_eps));
  PAGODA_ASSIGN_OR_RETURN(model.rope_theta,
                          config.OptionalPositiveNumber("rope_theta", model.rope_theta));
  PAGODA_ASSIGN_OR_RETURN(model.rope_scaling, ParseRopeScaling(config));
  PAGODA_ASSIGN_OR_RETURN(model.tie_word_embeddings,
                          config.OptionalBool("tie_word_embeddings", false));
  PAGODA_ASSIGN_OR_RETURN(model.attention_bias, config.OptionalBool("attention_bias", false));
  if (model.architecture == "Qwen2ForCausalLM") model.attention_bias = true;
  PAGODA_ASSIGN_OR_RETURN(model.torch_dtype, config.OptionalString("torch_dtype"));

  std::optional<int> bos;
  PAGODA_ASSIGN_OR_RETURN(bos, config.OptionalTokenId("bos_token_id"));
  model.bos_token_id = bos.value_or(-1);
  std::optional<std::vector<int>> eos;
  PAGODA_ASSIGN_OR_RETURN(eos, config.OptionalTokenIds("eos_token_id"));
  if (eos.has_value()) model.eos_token_ids = *eos;
  return model;
}

// Checks token ids against the vocabulary once every source has been merged.
absl::Status CheckTokenIds(const ModelConfig& model, const std::string& eos_label) {
  if (model.bos_token_id >= model.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: field \"bos_token_id\" (", model.bos_token_id,
                     ") must be below \"vocab_size\" (", model.vocab_size, ")"));
  }
  for (int id : model.eos_token_ids) {
    if (id >= model.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(eos_label, ": field \"eos_token_id\" (", id,
                                                     ") must be below \"vocab_size\" (",
                                                     model.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat("model directory ", model_dir, " does not exist"));
  }
  auto config_json = ReadJsonObject(dir / "config.json", "config.json");
  if (!config_json.ok()) return config_json.status();
  auto model = ParseConfig(FieldReader(*config_json, "config.json"));
  if (!model.ok()) return model.status();

  std::string eos_label = "config.json";
  const std::filesystem::path generation_path = dir / "generation_config.json";
  if (std::filesystem::exists(generation_path, error)) {
    auto generation_json = ReadJsonObject(generation_path, "generation_config.json");
    if (!generation_json.ok()) return generation_json.status();
    FieldReader generation(*generation_json, "generation_config.json");
    auto eos = generation.OptionalTokenIds("eos_token_id");
    if (!eos.ok()) return eos.status();
    if (eos->has_value()) {
      model->eos_token_ids = **eos;
      eos_label = "generation_config.json";
    }
  }
  absl::Status ids = CheckTokenIds(*model, eos_label);
  if (!ids.ok()) return ids;
  return model;
}

}  // namespace pagoda
