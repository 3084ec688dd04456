#include "scheduler/startup/draft_model_files.h"

#include <memory>

#include "absl/strings/str_cat.h"

namespace pagoda::scheduler {
namespace {

absl::Status DraftError(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--speculative-config: ", problem));
}

}  // namespace

absl::Status CheckDraftModelFiles(const SpeculativeConfig& speculative, const ModelConfig& target,
                                  int max_model_len, const Tokenizer* target_tokenizer) {
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
