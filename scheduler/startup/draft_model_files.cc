#include "scheduler/startup/draft_model_files.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/safetensors.h"
#include "common/tensor_parallel_plan.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler {
namespace {

absl::Status DraftError(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--speculative-config: ", problem));
}

// Whether an EAGLE-3 head's config.json sets eagle_config.
// use_aux_hidden_state false: such a head has no fc (vLLM builds none). Any
// other value is left for the worker to judge.
bool Eagle3WithoutAuxHiddenStates(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "config.json");
  const nlohmann::json json = nlohmann::json::parse(in, nullptr, false);
  if (!json.is_object() || !json.contains("eagle_config")) return false;
  const nlohmann::json& eagle = json["eagle_config"];
  return eagle.is_object() && eagle.contains("use_aux_hidden_state") &&
         eagle["use_aux_hidden_state"].is_boolean() && !eagle["use_aux_hidden_state"].get<bool>();
}

// An EAGLE head (vLLM's EAGLE-1/2 layout): a Llama config of the target's
// hidden and vocabulary sizes, and an fc over concat(embedding, hidden);
// with `eagle3`, an EAGLE-3 head: the same config sizes and an fc over three
// target layers' hidden states; at a `draft_tensor_parallel_size` above 1,
// its decoder layer must split over that many ranks (an EAGLE-3 head without
// aux hidden states has no fc to check). The worker checks every
// other tensor (and an EAGLE-3 head's layer ids and d2t) as it loads them.
absl::Status CheckEagleHeadFiles(const std::string& dir, const ModelConfig& target,
                                 int max_model_len, bool eagle3, int draft_tensor_parallel_size) {
  absl::StatusOr<ModelConfig> head = LoadModelConfig(dir);
  if (!head.ok()) return DraftError(absl::StrCat("EAGLE head: ", head.status().message()));
  for (const auto& [name, value, expected] :
       {std::tuple{"hidden_size", head->hidden_size, target.hidden_size},
        std::tuple{"vocab_size", head->vocab_size, target.vocab_size}}) {
    if (value != expected) {
      return DraftError(absl::StrCat("the EAGLE head's ", name, " ", value,
                                     " differs from the target's ", expected));
    }
  }
  if (head->max_position_embeddings < max_model_len) {
    return DraftError(absl::StrCat("the EAGLE head's max_position_embeddings ",
                                   head->max_position_embeddings, " is below --max-model-len ",
                                   max_model_len));
  }
  if (draft_tensor_parallel_size > 1) {
    absl::Status split = CheckTensorParallelSplit(*head, draft_tensor_parallel_size);
    if (!split.ok()) return DraftError(absl::StrCat("EAGLE head: ", split.message()));
  }
  absl::StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir);
  if (!store.ok()) return DraftError(absl::StrCat("EAGLE head: ", store.status().message()));
  if (eagle3 && Eagle3WithoutAuxHiddenStates(dir)) return absl::OkStatus();
  absl::StatusOr<TensorView> fc = (*store)->Get("fc.weight");
  if (!fc.ok()) {
    return DraftError(eagle3 ? "the EAGLE head has no fc.weight (an EAGLE-3 head: fc.weight, "
                               "midlayer.*, norm.weight, lm_head.weight, d2t)"
                             : "the EAGLE head has no fc.weight (an EAGLE-1/2 head: fc.weight, "
                               "layers.0.*)");
  }
  const std::vector<int64_t> expected = {target.hidden_size,
                                         (eagle3 ? 3 : 2) * int64_t{target.hidden_size}};
  if (fc->shape != expected) {
    return DraftError(absl::StrCat("the EAGLE head's fc.weight is ", ShapeString(fc->shape),
                                   ", expected ", ShapeString(expected)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDraftModelFiles(const SpeculativeConfig& speculative, const ModelConfig& target,
                                  int max_model_len, const Tokenizer* target_tokenizer,
                                  int draft_tensor_parallel_size) {
  if (speculative.method == SpeculativeMethod::kEagle ||
      speculative.method == SpeculativeMethod::kEagle3) {
    return CheckEagleHeadFiles(speculative.model, target, max_model_len,
                               speculative.method == SpeculativeMethod::kEagle3,
                               draft_tensor_parallel_size);
  }
  if (speculative.method != SpeculativeMethod::kDraftModel) return absl::OkStatus();
  absl::StatusOr<ModelConfig> draft = LoadModelConfig(speculative.model);
  if (!draft.ok()) return DraftError(absl::StrCat("draft model: ", draft.status().message()));
  if (draft->vocab_size != target.vocab_size) {
    return DraftError(absl::StrCat("the draft model's vocab_size ", draft->vocab_size,
                                   " differs from the target's ", target.vocab_size));
  }
  if (draft->max_position_embeddings < max_model_len) {
    return DraftError(absl::StrCat("the draft model's max_position_embeddings ",
                                   draft->max_position_embeddings, " is below --max-model-len ",
                                   max_model_len));
  }
  if (draft_tensor_parallel_size > 1) {
    absl::Status split = CheckTensorParallelSplit(*draft, draft_tensor_parallel_size);
    if (!split.ok()) return DraftError(absl::StrCat("draft model: ", split.message()));
  }
  if (target_tokenizer == nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(speculative.model);
  if (!tokenizer.ok()) {
    return DraftError(absl::StrCat("draft model: ", tokenizer.status().message()));
  }
  if (*tokenizer != nullptr && (*tokenizer)->vocab_size() != target_tokenizer->vocab_size()) {
    return DraftError(absl::StrCat("the draft model's tokenizer has ", (*tokenizer)->vocab_size(),
                                   " tokens, the target's ", target_tokenizer->vocab_size()));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
