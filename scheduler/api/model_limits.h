// What a request is checked against: the served model's limits and the
// sampling defaults of its generation config. A header of its own so that
// every part of validation (request_validation, logits_processing_validation)
// reads the same limits without including one another.
#ifndef PAGODA_SCHEDULER_API_MODEL_LIMITS_H_
#define PAGODA_SCHEDULER_API_MODEL_LIMITS_H_

#include <memory>
#include <optional>

#include "common/sampling_limits.h"
#include "scheduler/constraints/token_vocabulary.h"

namespace pagoda::scheduler {

// Sampling defaults for the fields a request leaves unset: the model's
// generation_config.json under --generation-config auto (vLLM's default
// sampling params), nothing under vllm. Unset here: the API's own default
// (temperature 0 = greedy over gRPC, top_k off, top_p 1, min_p 0,
// repetition_penalty 1).
struct SamplingDefaults {
  std::optional<float> temperature;
  std::optional<int> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  // max_new_tokens (vLLM's default max_tokens): the max_tokens of an OpenAI
  // request whose API default is "as many as the model length allows" (chat
  // without one, or any request's max_tokens null).
  std::optional<int> max_tokens;
  // vLLM's override_max_tokens: no request runs past it, whatever it asks
  // (max_new_tokens of a --generation-config DIR's file, or of
  // --override-generation-config).
  std::optional<int> max_tokens_cap;
};

// What the frontend checks a request against.
struct ModelLimits {
  int vocab_size = 0;
  int max_model_len = 0;
  int bos_token_id = -1;  // Prepended to text prompts when >= 0.
  // vLLM's --max-logprobs: the most logprobs and prompt logprobs a request
  // may ask per token, at most kMaxTopLogprobs.
  int max_logprobs = kMaxTopLogprobs;
  SamplingDefaults defaults;
  // The tokens' bytes, which constraints are matched against; null: the
  // model takes no constraint.
  std::shared_ptr<const constraints::TokenVocabulary> token_vocabulary;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_MODEL_LIMITS_H_
