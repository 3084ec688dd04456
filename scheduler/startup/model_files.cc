#include "scheduler/startup/model_files.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

// The tokens' bytes for structured outputs, built once; null (constraints
// refused) for a model without a tokenizer or one that cannot list them.
// Tokens past the model's vocabulary can never be drawn and are left out.
std::shared_ptr<const constraints::TokenVocabulary> MakeTokenVocabulary(const ModelFiles& model) {
  if (model.tokenizer == nullptr) return nullptr;
  absl::StatusOr<std::vector<std::optional<std::string>>> bytes = model.tokenizer->TokenBytes();
  if (bytes.ok() && static_cast<int>(bytes->size()) > model.config.vocab_size) {
    bytes->resize(model.config.vocab_size);
  }
  absl::StatusOr<std::shared_ptr<const constraints::TokenVocabulary>> vocabulary =
      bytes.ok()
          ? constraints::TokenVocabulary::Create(*std::move(bytes), model.config.vocab_size)
          : absl::StatusOr<std::shared_ptr<const constraints::TokenVocabulary>>(bytes.status());
  if (!vocabulary.ok()) {
    LOG(WARNING) << "structured outputs off: " << vocabulary.status();
    return nullptr;
  }
  LOG(INFO) << "structured outputs: " << (*vocabulary)->size() << " tokens with bytes";
  return *std::move(vocabulary);
}

}  // namespace

absl::StatusOr<ModelFiles> LoadModelFiles(const ModelOptions& options) {
  ModelFiles files;
  absl::StatusOr<std::optional<text::ChatContentFormat>> format =
      text::ParseChatContentFormat(options.chat_template_content_format);
  if (!format.ok()) return format.status();
  absl::StatusOr<ModelConfig> model = LoadModelConfig(options.model_dir);
  if (!model.ok()) return model.status();
  files.config = *std::move(model);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(options.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  files.tokenizer = *std::move(tokenizer);
  LOG(INFO) << "tokenizer: "
            << (files.tokenizer != nullptr ? absl::StrCat(files.tokenizer->kind(), ", ",
                                                          files.tokenizer->vocab_size(), " tokens")
                                           : std::string("none (token ids only)"));
  absl::StatusOr<std::unique_ptr<text::ChatTemplate>> chat_template =
      text::ChatTemplate::Load(options.model_dir, options.chat_template);
  if (!chat_template.ok()) return chat_template.status();
  files.chat_template = *std::move(chat_template);
  if (files.chat_template != nullptr) {
    files.chat_content_format = format->value_or(files.chat_template->detected_content_format());
  }
  LOG(INFO) << "chat template: "
            << (files.chat_template != nullptr
                    ? absl::StrCat("loaded, content format ",
                                   text::ChatContentFormatName(files.chat_content_format),
                                   format->has_value() ? "" : " (detected)")
                    : std::string("none"));
  absl::StatusOr<SamplingDefaults> defaults = LoadSamplingDefaults(
      options.generation_config, options.model_dir, options.override_generation_config);
  if (!defaults.ok()) return defaults.status();
  files.sampling_defaults = *defaults;
  LOG(INFO) << "sampling defaults (--generation-config " << options.generation_config
            << (options.override_generation_config.empty() ? "" : ", overridden")
            << "): " << DescribeSamplingDefaults(files.sampling_defaults);
  return files;
}

ModelLimits MakeModelLimits(const ModelFiles& model, int max_model_len, int max_logprobs) {
  ModelLimits limits;
  limits.max_logprobs = max_logprobs;
  limits.vocab_size = model.config.vocab_size;
  limits.max_model_len = max_model_len;
  limits.bos_token_id = model.config.bos_token_id;
  limits.defaults = model.sampling_defaults;
  limits.token_vocabulary = MakeTokenVocabulary(model);
  // A tokenizer.json knows whether its model starts prompts with BOS (Qwen's
  // config.json names one that its tokenizer never adds).
  if (model.tokenizer != nullptr && model.tokenizer->bos_token_to_add().has_value()) {
    limits.bos_token_id = *model.tokenizer->bos_token_to_add();
  }
  return limits;
}

}  // namespace pagoda::scheduler
