#include "scheduler/api/lora_adapters.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/lora_adapter.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/lora/lora_dir_guard.h"
#include "scheduler/lora/lora_options.h"

namespace pagoda::scheduler {
namespace {

using nlohmann::json;

// A string field of a load or unload body: "" when absent or null (vLLM's
// "must be provided" then answers), INVALID_ARGUMENT when not a string.
absl::StatusOr<std::string> StringField(const json& body, const char* key) {
  if (!body.contains(key) || body[key].is_null()) return std::string();
  if (!body[key].is_string())
    return absl::InvalidArgumentError(absl::StrCat(key, ": must be a string"));
  return body[key].get<std::string>();
}

absl::Status CheckName(const std::string& name) {
  absl::Status status = lora::CheckLoraName(name);
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat("lora_name: ", status.message()));
}

absl::Status CheckBody(const json& body) {
  if (body.is_object()) return absl::OkStatus();
  return absl::InvalidArgumentError("body: must be a JSON object");
}

}  // namespace

LoraAdapters::LoraAdapters(LoraAdaptersOptions options) : options_(std::move(options)) {}

bool LoraAdapters::IsBaseModelName(absl::string_view name) const {
  return name == options_.base_model_name ||
         std::find(options_.base_model_aliases.begin(), options_.base_model_aliases.end(), name) !=
             options_.base_model_aliases.end();
}

absl::StatusOr<std::string> LoraAdapters::AdapterFor(absl::string_view model) const {
  if (model.empty() || IsBaseModelName(model)) return std::string();
  if (options_.registry->Find(model).ok()) return std::string(model);
  return absl::NotFoundError(absl::StrCat("model: `", model.substr(0, lora::kMaxLoraNameBytes),
                                          "` does not exist; this server serves `",
                                          options_.base_model_name,
                                          "` and the LoRA adapters GET /v1/models lists"));
}

json LoraAdapters::Card(const lora::LoraEntry& entry, int64_t created) const {
  const std::string& parent =
      entry.spec.base_model_name.empty() ? options_.base_model_name : entry.spec.base_model_name;
  return {{"id", entry.spec.name},   {"object", "model"},       {"created", created},
          {"owned_by", "pagoda"},    {"root", entry.spec.path}, {"parent", parent},
          {"max_model_len", nullptr}};
}

std::vector<json> LoraAdapters::ModelCards(int64_t created) const {
  std::vector<json> cards;
  for (const lora::LoraEntry& entry : options_.registry->List()) {
    cards.push_back(Card(entry, created));
  }
  return cards;
}

absl::StatusOr<json> LoraAdapters::ModelCard(absl::string_view name, int64_t created) const {
  absl::StatusOr<lora::LoraEntry> entry = options_.registry->Find(name);
  if (!entry.ok()) return entry.status();
  return Card(*entry, created);
}

absl::StatusOr<std::string> LoraAdapters::Load(const json& body) {
  if (absl::Status status = CheckBody(body); !status.ok()) return status;
  absl::StatusOr<std::string> name = StringField(body, "lora_name");
  if (!name.ok()) return name.status();
  absl::StatusOr<std::string> path = StringField(body, "lora_path");
  if (!path.ok()) return path.status();
  if (name->empty() || path->empty()) {
    return absl::InvalidArgumentError("Both 'lora_name' and 'lora_path' must be provided.");
  }
  if (absl::Status status = CheckName(*name); !status.ok()) return status;
  if (path->size() > kMaxLoraPathBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lora_path: at most ", kMaxLoraPathBytes, " bytes, got ", path->size()));
  }
  if (body.contains("load_inplace") && body["load_inplace"] != false) {
    return absl::InvalidArgumentError(
        "load_inplace: is not supported; unload the adapter, then load it again");
  }
  if (IsBaseModelName(*name)) {  // `model` could never reach it.
    return absl::InvalidArgumentError(
        absl::StrCat("lora_name: '", *name, "' is the base model's name"));
  }
  const std::string duplicate =
      absl::StrCat("The lora adapter '", *name, "' has already been loaded.");
  if (options_.registry->Find(*name).ok()) return absl::InvalidArgumentError(duplicate);
  // The guard first: a path outside --lora-dir is refused before anything
  // of it is read or even checked for existence.
  absl::StatusOr<std::string> resolved = lora::ResolveUnderLoraDir(options_.lora_dir, *path);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat("lora_path: ", resolved.status().message()));
  }
  // Read and checked here, so that a bad adapter is refused with its line
  // now rather than failing the requests that would name it.
  absl::StatusOr<LoraAdapter> adapter =
      LoadLoraAdapter(*resolved, options_.base, options_.max_lora_rank,
                      options_.max_lora_trainable_tokens);
  if (!adapter.ok()) {
    return absl::Status(adapter.status().code(),
                        absl::StrCat("lora_path: ", adapter.status().message()));
  }
  absl::StatusOr<int> id = options_.registry->Add({*name, *resolved, ""});
  if (absl::IsAlreadyExists(id.status())) return absl::InvalidArgumentError(duplicate);
  if (!id.ok()) return absl::InvalidArgumentError(id.status().message());
  return absl::StrCat("Success: LoRA adapter '", *name, "' added successfully.");
}

absl::StatusOr<std::string> LoraAdapters::Unload(const json& body) {
  if (absl::Status status = CheckBody(body); !status.ok()) return status;
  absl::StatusOr<std::string> name = StringField(body, "lora_name");
  if (!name.ok()) return name.status();
  if (name->empty()) {
    return absl::InvalidArgumentError("'lora_name' needs to be provided to unload a LoRA adapter.");
  }
  if (absl::Status status = CheckName(*name); !status.ok()) return status;
  absl::StatusOr<int> id = options_.registry->Remove(*name);
  if (absl::IsNotFound(id.status())) {
    return absl::NotFoundError(absl::StrCat("The lora adapter '", *name, "' cannot be found."));
  }
  if (!id.ok()) return id.status();
  if (options_.forget) options_.forget(*id);
  return absl::StrCat("Success: LoRA adapter '", *name, "' removed successfully.");
}

int LoraRouteHttpStatus(const absl::Status& status) {
  if (absl::IsFailedPrecondition(status)) return 409;
  return HttpStatusOf(status);
}

}  // namespace pagoda::scheduler
