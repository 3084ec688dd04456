// The LoRA serving flags, vLLM's names: --enable-lora, --lora-modules,
// --max-loras, --max-lora-rank, --max-cpu-loras, and Pagoda's --lora-dir;
// the parsing of --lora-modules' two forms and the checks across flags.
#ifndef PAGODA_SCHEDULER_LORA_LORA_OPTIONS_H_
#define PAGODA_SCHEDULER_LORA_LORA_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/lora_limits.h"

namespace pagoda::lora {

// One adapter to serve: its name in `model` fields, its directory, and the
// model it lists as `parent` in /v1/models (empty: the served base model).
struct LoraModuleSpec {
  std::string name;
  std::string path;
  std::string base_model_name;
  bool operator==(const LoraModuleSpec&) const = default;
};

inline constexpr int kMaxLoraNameBytes = 256;

struct LoraOptions {
  bool enable_lora = false;
  std::vector<LoraModuleSpec> modules;
  int max_loras = 1;  // Adapters resident in the worker's slots at once.
  int max_lora_rank = 16;
  int max_cpu_loras = 0;  // Adapters cached in host memory; 0: max_loras.
  // vLLM's --max-lora-trainable-tokens: the most trainable tokens (PEFT's
  // trainable_token_indices) an adapter may list per module; 0: none.
  int max_lora_trainable_tokens = 0;
  std::string lora_dir;  // The only directory runtime loads may read; empty: none may.
};

// An adapter name: 1..256 bytes of printable ASCII without spaces, and not
// "=" (which would make `name=path` ambiguous). INVALID_ARGUMENT naming it.
absl::Status CheckLoraName(absl::string_view name);

// One --lora-modules value: `name=path`, or vLLM's JSON form
// {"name": ..., "path": ..., "base_model_name": ...} (base_model_name
// optional). INVALID_ARGUMENT, one line quoting the value, otherwise.
absl::StatusOr<LoraModuleSpec> ParseLoraModule(absl::string_view value);

// Every value of --lora-modules; a name given twice is INVALID_ARGUMENT
// naming it.
absl::StatusOr<std::vector<LoraModuleSpec>> ParseLoraModules(
    const std::vector<std::string>& values);

// The values in one --lora-modules flag string (absl flags take one string
// where vLLM's argparse takes several words): split at spaces and commas
// outside JSON objects, so "a=/x b=/y", "a=/x,b=/y" and
// '{"name": "a", "path": "/x"} b=/y' all give two. A path holding a space
// or a comma needs the JSON form.
std::vector<std::string> SplitLoraModulesFlag(absl::string_view flag);

// The checks across flags, each INVALID_ARGUMENT naming the flag:
// --lora-modules or --lora-dir without --enable-lora; --max-loras < 1;
// --max-lora-rank outside [1, 512]; --max-cpu-loras below --max-loras;
// --max-lora-trainable-tokens outside [0, 16384].
// Fills max_cpu_loras = max_loras when it is 0.
absl::Status ValidateLoraOptions(LoraOptions& options);

}  // namespace pagoda::lora

#endif  // PAGODA_SCHEDULER_LORA_LORA_OPTIONS_H_
