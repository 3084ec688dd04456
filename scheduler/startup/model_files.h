#ifndef PAGODA_SCHEDULER_STARTUP_MODEL_FILES_H_
#define PAGODA_SCHEDULER_STARTUP_MODEL_FILES_H_

// Start-up: what the model directory gives the server itself (the workers
// load the weights): config.json, the tokenizer, the chat template and the
// sampling defaults, and the request limits that follow from them.

#include <memory>

#include "absl/status/statusor.h"
#include "common/model_config.h"
#include "scheduler/api/generation_config.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/config/server_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

struct ModelFiles {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;               // Null: token ids only.
  std::unique_ptr<text::ChatTemplate> chat_template;  // Null: no chat completions.
  // --chat-template-content-format, "auto" resolved against the template.
  text::ChatContentFormat chat_content_format = text::ChatContentFormat::kString;
  SamplingDefaults sampling_defaults;  // --generation-config.
};

// Reads `options.model_dir`'s files; a template outside the supported Jinja
// subset or an unreadable file fails here, before any worker starts.
absl::StatusOr<ModelFiles> LoadModelFiles(const ModelOptions& options);

// The request limits of `model` served up to `max_model_len` tokens, with
// at most `max_logprobs` logprobs per token (--max-logprobs).
ModelLimits MakeModelLimits(const ModelFiles& model, int max_model_len, int max_logprobs);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STARTUP_MODEL_FILES_H_
