// A PEFT LoRA adapter's adapter_config.json, read and checked against what
// Pagoda serves: the seven Llama projections, embed_tokens and lm_head as
// targets, a rank within --max-lora-rank, plain LoRA or rsLoRA scaling, and
// PEFT's trainable_token_indices (whole replacement rows of embed_tokens or
// lm_head for chosen tokens). Also the shapes each target takes on a given
// base model.
#ifndef PAGODA_COMMON_LORA_ADAPTER_CONFIG_H_
#define PAGODA_COMMON_LORA_ADAPTER_CONFIG_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_config.h"

namespace pagoda {

// The projections an adapter may target, in a decoder layer's order.
enum class LoraModule { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraModules = 7;
inline constexpr std::array<LoraModule, kNumLoraModules> kAllLoraModules = {
    LoraModule::kQ,    LoraModule::kK,  LoraModule::kV,   LoraModule::kO,
    LoraModule::kGate, LoraModule::kUp, LoraModule::kDown};

// The two targets outside the decoder layers, by their Hugging Face names:
// the token embedding (its update maps a token id to a hidden row) and the
// output head (hidden to vocabulary logits).
inline constexpr char kLoraEmbedTokens[] = "embed_tokens";
inline constexpr char kLoraLmHead[] = "lm_head";

// "q_proj", ..., "down_proj": the Hugging Face module name.
absl::string_view LoraModuleName(LoraModule module);
// The module named `name` ("q_proj" ...); nullopt for anything else.
std::optional<LoraModule> FindLoraModule(absl::string_view name);
// "self_attn" for q/k/v/o, "mlp" for gate/up/down: the parent in HF names.
absl::string_view LoraModuleParent(LoraModule module);

// The base projection's [out_features, in_features] on `base`.
struct LinearShape {
  int64_t out = 0;
  int64_t in = 0;
};
LinearShape LoraModuleShape(const ModelConfig& base, LoraModule module);

struct LoraAdapterConfig {
  int rank = 0;      // "r".
  double alpha = 0;  // "lora_alpha".
  bool use_rslora = false;
  // The list of target_modules. Empty when target_modules was a string (a
  // regex in PEFT, or "all-linear"): then the tensors present name the
  // targets, each still one of the seven.
  std::vector<LoraModule> targets;
  bool targets_from_tensors = false;
  // "embed_tokens" and "lm_head" listed in target_modules (not layers'
  // projections: one update each for the whole model).
  bool embed_tokens = false;
  bool lm_head = false;
  // layers_to_transform when given: only these layers carry the targets.
  std::vector<int> layers;
  // trainable_token_indices: the tokens whose embed_tokens rows, and whose
  // lm_head rows, the adapter replaces outright (PEFT's TrainableTokens; a
  // plain list names the embedding's). Each unique, in the file's order,
  // which is its replacement rows' order; empty when none.
  std::vector<int32_t> embed_token_ids;
  std::vector<int32_t> lm_head_token_ids;
  // alpha / r, or alpha / sqrt(r) with use_rslora (rank-stabilized LoRA).
  double Scale() const;
};

// Parses adapter_config.json's text. `source` names the file in messages.
// INVALID_ARGUMENT, one line naming the file and the key, for: bad JSON; a
// peft_type other than "LORA"; r missing, not an integer, < 1 or above
// `max_rank`; lora_alpha missing or not a number; a target that is not one of
// the seven projections, embed_tokens or lm_head; and what vLLM
// refuses too: use_dora, bias other than "none", lora_bias, modules_to_save,
// fan_in_fan_out, a non-empty rank_pattern or alpha_pattern; and, as vLLM,
// a trainable_token_indices that is not a non-empty list of unique
// non-negative token ids (or a map of module names to such lists) or that
// lists more than `max_trainable_tokens` per module
// (--max-lora-trainable-tokens; 0 refuses every one), or names a module
// other than embed_tokens or lm_head. Keys PEFT writes that change nothing
// at inference (lora_dropout, task_type, base_model_name_or_path,
// init_lora_weights, ...) are ignored.
absl::StatusOr<LoraAdapterConfig> ParseLoraAdapterConfig(absl::string_view json_text,
                                                         const std::string& source, int max_rank,
                                                         int max_trainable_tokens = 0);

}  // namespace pagoda

#endif  // PAGODA_COMMON_LORA_ADAPTER_CONFIG_H_
