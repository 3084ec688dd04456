#include "scheduler/startup/lora_modules.h"

#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/lora_adapter.h"
#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

// The adapter checked and its path resolved, or the one-line refusal.
absl::StatusOr<lora::LoraModuleSpec> CheckedModule(lora::LoraModuleSpec spec,
                                                   const ModelConfig& base, int max_rank,
                                                   int max_trainable_tokens) {
  const auto refuse = [&spec](const absl::Status& status) {
    return absl::Status(status.code(), absl::StrCat("--lora-modules: adapter \"", spec.name, "\" (",
                                                    spec.path, "): ", status.message()));
  };
  std::error_code error;
  const std::filesystem::path canonical = std::filesystem::canonical(spec.path, error);
  if (error || !std::filesystem::is_directory(canonical, error)) {
    return refuse(absl::NotFoundError("not an existing directory"));
  }
  spec.path = canonical.string();
  absl::StatusOr<LoraAdapter> adapter = LoadLoraAdapter(spec.path, base, max_rank, max_trainable_tokens);
  if (!adapter.ok()) return refuse(adapter.status());
  return spec;
}

}  // namespace

absl::Status RegisterLoraModules(const lora::LoraOptions& options, const ModelConfig& base,
                                 lora::LoraRegistry& registry) {
  if (!options.enable_lora) return absl::OkStatus();
  std::set<std::string> names;
  for (const lora::LoraModuleSpec& spec : options.modules) {
    if (!names.insert(spec.name).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("--lora-modules: the adapter name \"", spec.name, "\" is given twice"));
    }
  }
  std::vector<lora::LoraModuleSpec> checked;
  for (const lora::LoraModuleSpec& spec : options.modules) {
    absl::StatusOr<lora::LoraModuleSpec> module =
        CheckedModule(spec, base, options.max_lora_rank, options.max_lora_trainable_tokens);
    if (!module.ok()) return module.status();
    checked.push_back(*std::move(module));
  }
  for (lora::LoraModuleSpec& spec : checked) {
    const std::string name = spec.name;
    absl::StatusOr<int> id = registry.Add(std::move(spec));
    if (!id.ok())
      return absl::Status(id.status().code(),
                          absl::StrCat("--lora-modules: ", id.status().message()));
    LOG(INFO) << "LoRA adapter \"" << name << "\" registered (id " << *id << ")";
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
