#include "scheduler/lora/lora_options.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/flag_checks.h"
#include "nlohmann/json.hpp"

namespace pagoda::lora {
namespace {

using Json = nlohmann::json;

// At most 80 bytes of a hostile value, for messages.
std::string Quote(absl::string_view value) {
  return absl::StrCat("\"", value.substr(0, 80), value.size() > 80 ? "...\"" : "\"");
}

absl::StatusOr<LoraModuleSpec> ParseJsonForm(absl::string_view value) {
  Json json = Json::parse(value, nullptr, /*allow_exceptions=*/false);
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--lora-modules ", Quote(value), ": ", why));
  };
  if (json.is_discarded() || !json.is_object()) return error("not a JSON object");
  LoraModuleSpec spec;
  for (const auto& [key, field] : json.items()) {
    if (key != "name" && key != "path" && key != "base_model_name") {
      return error(absl::StrCat("unknown key ", Quote(key)));
    }
    if (!field.is_string()) return error(absl::StrCat("\"", key, "\" must be a string"));
  }
  spec.name = json.value("name", "");
  spec.path = json.value("path", "");
  spec.base_model_name = json.value("base_model_name", "");
  if (spec.path.empty()) return error("\"path\" is missing");
  if (absl::Status status = CheckLoraName(spec.name); !status.ok()) {
    return error(status.message());
  }
  return spec;
}

}  // namespace

absl::Status CheckLoraName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxLoraNameBytes) {
    return absl::InvalidArgumentError("a LoRA name must be 1 to 256 bytes");
  }
  for (char c : name) {
    if (c <= ' ' || c > '~' || c == '=') {
      return absl::InvalidArgumentError(absl::StrCat(
          "LoRA name ", Quote(name), " must be printable ASCII without spaces or '='"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<LoraModuleSpec> ParseLoraModule(absl::string_view value) {
  if (!value.empty() && value.front() == '{') return ParseJsonForm(value);
  const size_t equals = value.find('=');
  if (equals == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora-modules ", Quote(value), ": expected name=path or a JSON object"));
  }
  LoraModuleSpec spec{std::string(value.substr(0, equals)), std::string(value.substr(equals + 1)),
                      ""};
  if (absl::Status status = CheckLoraName(spec.name); !status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora-modules ", Quote(value), ": ", status.message()));
  }
  if (spec.path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lora-modules ", Quote(value), ": the path is empty"));
  }
  return spec;
}

std::vector<std::string> SplitLoraModulesFlag(absl::string_view flag) {
  std::vector<std::string> values;
  std::string current;
  int depth = 0;  // Of JSON braces, outside strings.
  bool in_string = false, escaped = false;
  for (char c : flag) {
    if (depth == 0 && !in_string && (c == ' ' || c == '\t' || c == '\n' || c == ',')) {
      if (!current.empty()) values.push_back(std::move(current));
      current.clear();
      continue;
    }
    current.push_back(c);
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (depth > 0 && c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && depth > 0) {
      --depth;
    }
  }
  if (!current.empty()) values.push_back(std::move(current));
  return values;
}

absl::StatusOr<std::vector<LoraModuleSpec>> ParseLoraModules(
    const std::vector<std::string>& values) {
  std::vector<LoraModuleSpec> specs;
  std::set<std::string> names;
  for (const std::string& value : values) {
    auto spec = ParseLoraModule(value);
    if (!spec.ok()) return spec.status();
    if (!names.insert(spec->name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--lora-modules names ", Quote(spec->name), " twice"));
    }
    specs.push_back(*std::move(spec));
  }
  return specs;
}

absl::Status ValidateLoraOptions(LoraOptions& options) {
  if (!options.enable_lora && (!options.modules.empty() || !options.lora_dir.empty())) {
    return absl::InvalidArgumentError("--lora-modules and --lora-dir need --enable-lora");
  }
  if (absl::Status status = flag_check::FirstError({
          flag_check::Range("max-loras", options.max_loras, 1, kMaxLoraSlots),
          flag_check::Range("max-lora-rank", options.max_lora_rank, 1, kMaxLoraRank),
          flag_check::Range("max-cpu-loras", options.max_cpu_loras, 0, kMaxCpuLoras,
                            "0 (= --max-loras)"),
          flag_check::Range("max-lora-trainable-tokens", options.max_lora_trainable_tokens, 0,
                            kMaxLoraTrainableTokens),
      });
      !status.ok()) {
    return status;
  }
  if (options.max_cpu_loras == 0) options.max_cpu_loras = options.max_loras;
  if (options.max_cpu_loras < options.max_loras) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-cpu-loras ", options.max_cpu_loras,
                     " is below --max-loras: expected 0 (= --max-loras) or at least ",
                     options.max_loras));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::lora
