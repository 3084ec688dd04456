// The served LoRA adapters as the front doors see them (docs/lora.md): which
// adapter a request's `model` names, the adapters /v1/models lists, and
// vLLM's runtime routes /v1/load_lora_adapter and /v1/unload_lora_adapter
// over the one lora::LoraRegistry the engine also reads.
#ifndef PAGODA_SCHEDULER_API_LORA_ADAPTERS_H_
#define PAGODA_SCHEDULER_API_LORA_ADAPTERS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/lora_limits.h"
#include "common/model_config.h"
#include "nlohmann/json.hpp"
#include "scheduler/lora/lora_registry.h"

namespace pagoda::scheduler {

struct LoraAdaptersOptions {
  lora::LoraRegistry* registry = nullptr;  // Non-null; outlives the adapters.
  std::string lora_dir;  // --lora-dir: the only directory runtime loads read ("" = none).
  int max_lora_rank = 16;
  int max_lora_trainable_tokens = 0;  // --max-lora-trainable-tokens.
  ModelConfig base;                   // The base model's shapes, which an adapter must fit.
  std::string base_model_name;        // The served model's name: `parent` of the adapters.
  std::vector<std::string> base_model_aliases;  // Its other names (--served-model-name A B).
  // Called with an unloaded adapter's id once the registry removed it: the
  // engine frees its worker slot and host copy (Engine::ForgetLoraAdapter).
  std::function<void(int lora_id)> forget;
};

// Thread-safe.
class LoraAdapters {
 public:
  explicit LoraAdapters(LoraAdaptersOptions options);

  // The adapter a request's `model` names: "" for the base model (`model`
  // empty or one of the served model's names), `model` itself when it is a served
  // adapter; NOT_FOUND ("model: ..." as vLLM's _check_model) otherwise.
  absl::StatusOr<std::string> AdapterFor(absl::string_view model) const;

  // /v1/models' cards of the adapters, as vLLM: id = name, root = path,
  // parent = the base model (or the adapter's base_model_name).
  std::vector<nlohmann::json> ModelCards(int64_t created) const;
  // One card; NOT_FOUND for a name that is not served.
  absl::StatusOr<nlohmann::json> ModelCard(absl::string_view name, int64_t created) const;

  // POST /v1/load_lora_adapter {"lora_name", "lora_path"}: the answer's
  // text on success. INVALID_ARGUMENT (400) for a missing or malformed
  // field, a name already served (vLLM's 400) or the base model's, `load_inplace`, or an
  // adapter that does not fit the model (rank, target, shape, corrupt
  // file: the loader's line); PERMISSION_DENIED (403) for a path outside
  // --lora-dir (always without it); NOT_FOUND (404) for a missing directory
  // or file inside it.
  absl::StatusOr<std::string> Load(const nlohmann::json& body);
  // POST /v1/unload_lora_adapter {"lora_name"}: INVALID_ARGUMENT for a
  // missing or malformed name, NOT_FOUND for one not served,
  // FAILED_PRECONDITION (409) while requests use it (refused, not deferred).
  absl::StatusOr<std::string> Unload(const nlohmann::json& body);

  lora::LoraRegistry* registry() const { return options_.registry; }

 private:
  nlohmann::json Card(const lora::LoraEntry& entry, int64_t created) const;
  bool IsBaseModelName(absl::string_view name) const;

  const LoraAdaptersOptions options_;
};

// The HTTP status of a LoRA route's refusal: HttpStatusOf, except that an
// adapter in use (FAILED_PRECONDITION) is 409 Conflict.
int LoraRouteHttpStatus(const absl::Status& status);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_LORA_ADAPTERS_H_
