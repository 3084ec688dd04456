#include "scheduler/api/request_validation.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sampling_limits.h"
#include "scheduler/api/logits_processing_validation.h"
#include "scheduler/api/stop_strings.h"
#include "scheduler/lora/lora_options.h"

namespace pagoda::scheduler {
namespace {

constexpr int kDefaultMaxTokens = 16;
// Sequences one request may generate: each holds blocks and a batch slot.
// Beam search asks the worker for 2 x width top logprobs, at most kMaxTopLogprobs.
constexpr int kMaxBeamWidth = kMaxTopLogprobs / 2;
constexpr float kMaxLengthPenalty = 10.0f;

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// n, best_of and beam search. Fills n, best_of, use_beam_search,
// length_penalty and early_stopping of `out`.
absl::Status ValidateSeveralSequences(const pagoda::v1::SamplingParams& sampling,
                                      const SamplingOptions& effective, SamplingOptions& out) {
  if (sampling.n() < 0 || sampling.n() > kMaxSequences) {
    return Invalid(absl::StrCat("sampling.n: must be in [0, ", kMaxSequences, "] (0 = 1), got ",
                                sampling.n()));
  }
  const int n = std::max(1, sampling.n());
  const int limit = sampling.use_beam_search() ? kMaxBeamWidth : kMaxSequences;
  if (sampling.best_of() < 0 || sampling.best_of() > limit) {
    return Invalid(absl::StrCat("sampling.best_of: must be in [0, ", limit, "] (0 = n)",
                                sampling.use_beam_search() ? " with beam search" : "", ", got ",
                                sampling.best_of()));
  }
  const int best_of = sampling.best_of() == 0 ? n : sampling.best_of();
  if (best_of < n) {
    return Invalid(absl::StrCat("sampling.best_of: must be >= n = ", n, ", got ", best_of));
  }
  const float length_penalty = sampling.length_penalty();
  if (!std::isfinite(length_penalty) || std::abs(length_penalty) > kMaxLengthPenalty) {
    return Invalid(absl::StrCat("sampling.length_penalty: must be in [-", kMaxLengthPenalty, ", ",
                                kMaxLengthPenalty, "] (0 = 1), got ", length_penalty));
  }
  if (sampling.use_beam_search()) {
    // Beams extend by their most likely tokens: nothing is drawn (as vLLM).
    // The request's own values: the model's sampling defaults do not apply.
    if (sampling.temperature() != 0 || (sampling.top_p() != 0 && sampling.top_p() != 1) ||
        sampling.top_k() != 0) {
      return Invalid(
          "sampling.use_beam_search: needs temperature 0 and top_k, top_p off (beams are not "
          "sampled)");
    }
  } else {
    if (length_penalty != 0 && length_penalty != 1) {
      return Invalid("sampling.length_penalty: only applies with use_beam_search");
    }
    if (best_of > 1 && effective.temperature < kGreedyTemperature) {
      return Invalid(absl::StrCat("sampling.best_of: ", best_of,
                                  " sequences need temperature > 0 (greedy ones would be equal); "
                                  "use use_beam_search for several greedy-like outputs"));
    }
  }
  out.n = n;
  out.best_of = best_of;
  out.use_beam_search = sampling.use_beam_search();
  out.length_penalty = length_penalty == 0 ? 1.0f : length_penalty;
  out.early_stopping = sampling.early_stopping();
  return absl::OkStatus();
}

// Bounds that cost nothing to check, so that no later work grows with an
// oversized input.
absl::Status CheckInputBounds(const pagoda::v1::GenerateRequest& request,
                              const ModelLimits& limits) {
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return Invalid(absl::StrCat("request_id: at most ", kMaxRequestIdBytes, " bytes, got ",
                                request.request_id().size()));
  }
  if (static_cast<int64_t>(request.prompt().size()) > MaxPromptBytes(limits)) {
    return Invalid(absl::StrCat("prompt: ", request.prompt().size(),
                                " bytes of text cannot fit max_model_len ", limits.max_model_len,
                                " tokens (limit ", MaxPromptBytes(limits), " bytes)"));
  }
  if (request.prompt_token_ids_size() > limits.max_model_len) {
    return Invalid(absl::StrFormat("prompt: %d tokens is longer than max_model_len %d",
                                   request.prompt_token_ids_size(), limits.max_model_len));
  }
  if (request.stopping().stop_token_ids_size() > kMaxStopTokenIds) {
    return Invalid(absl::StrCat("stopping.stop_token_ids: at most ", kMaxStopTokenIds, ", got ",
                                request.stopping().stop_token_ids_size()));
  }
  if (absl::Status sizes = ConstraintCompiler::CheckSizes(request); !sizes.ok()) return sizes;
  return CheckLogitsProcessingSizes(request.sampling(), limits);
}

// The prompt as token ids: exactly one of text (tokenized, BOS first when the
// model adds one) and token ids (each inside the vocabulary).
absl::Status ResolvePrompt(const pagoda::v1::GenerateRequest& request, const ModelLimits& limits,
                           const Tokenizer* tokenizer, std::vector<int32_t>& prompt_token_ids) {
  const bool has_text = !request.prompt().empty();
  const bool has_ids = request.prompt_token_ids_size() > 0;
  if (has_text && has_ids) {
    return Invalid("prompt: set exactly one of prompt and prompt_token_ids, not both");
  }
  if (!has_text && !has_ids) {
    return Invalid("prompt: empty; set prompt or prompt_token_ids");
  }
  if (has_text) {
    if (tokenizer == nullptr) {
      return Invalid("prompt: this model has no tokenizer; send prompt_token_ids instead");
    }
    absl::StatusOr<std::vector<int>> ids = tokenizer->Encode(request.prompt());
    if (!ids.ok()) return Invalid(absl::StrCat("prompt: ", ids.status().message()));
    if (limits.bos_token_id >= 0) prompt_token_ids.push_back(limits.bos_token_id);
    prompt_token_ids.insert(prompt_token_ids.end(), ids->begin(), ids->end());
    if (prompt_token_ids.empty()) return Invalid("prompt: tokenizes to no tokens");
  } else {
    for (int i = 0; i < request.prompt_token_ids_size(); ++i) {
      const int32_t id = request.prompt_token_ids(i);
      if (id < 0 || id >= limits.vocab_size) {
        return Invalid(absl::StrFormat("prompt_token_ids[%d]: token id %d is outside [0, %d)", i,
                                       id, limits.vocab_size));
      }
    }
    prompt_token_ids.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  }
  const int prompt_len = static_cast<int>(prompt_token_ids.size());
  if (prompt_len > limits.max_model_len) {
    return Invalid(absl::StrFormat("prompt: %d tokens is longer than max_model_len %d", prompt_len,
                                   limits.max_model_len));
  }
  return absl::OkStatus();
}

// Sampling values and logprobs. Fills `out` except a missing seed, which the
// validator draws.
absl::Status ValidateSampling(const pagoda::v1::GenerateRequest& request,
                              const ModelLimits& limits, const Tokenizer* tokenizer,
                              SamplingOptions& out) {
  const pagoda::v1::SamplingParams& sampling = request.sampling();
  const SamplingOptions effective = EffectiveSampling(sampling, limits.defaults);
  if (!std::isfinite(effective.temperature) || effective.temperature < 0) {
    return Invalid(absl::StrCat("sampling.temperature: must be finite and >= 0, got ",
                                effective.temperature));
  }
  if (!std::isfinite(sampling.length_penalty())) {
    return Invalid(
        absl::StrCat("sampling.length_penalty: must be finite, got ", sampling.length_penalty()));
  }
  if (!std::isfinite(effective.top_p) || effective.top_p < 0 || effective.top_p > 1) {
    return Invalid(
        absl::StrCat("sampling.top_p: must be in (0, 1] (0 = 1), got ", effective.top_p));
  }
  if (effective.top_k < 0) {
    return Invalid(absl::StrCat("sampling.top_k: must be >= 0 (0 = off), got ", effective.top_k));
  }
  const int most = limits.max_logprobs;  // --max-logprobs.
  if (request.logprobs() < 0 || request.logprobs() > most) {
    return Invalid(absl::StrCat("logprobs: must be in [0, ", most, "] (--max-logprobs), got ",
                                request.logprobs()));
  }
  if (request.has_prompt_logprobs() &&
      (request.prompt_logprobs() < 0 || request.prompt_logprobs() > most)) {
    return Invalid(absl::StrCat("prompt_logprobs: must be in [0, ", most,
                                "] (--max-logprobs), got ", request.prompt_logprobs()));
  }
  absl::Status several = ValidateSeveralSequences(sampling, effective, out);
  if (!several.ok()) return several;
  out.temperature = effective.temperature;
  out.top_k = effective.top_k;
  out.top_p = effective.top_p == 0 ? 1.0f : effective.top_p;
  out.num_logprobs = request.logprobs();
  out.num_prompt_logprobs = request.has_prompt_logprobs() ? request.prompt_logprobs() : -1;
  out.seed = sampling.seed();
  return ValidateLogitsProcessing(sampling, limits, tokenizer, out);
}

// The scheduling priority, bounded by kMaxPriorityMagnitude.
absl::Status ValidatePriority(const pagoda::v1::GenerateRequest& request, ValidatedRequest& out) {
  if (request.priority() < -kMaxPriorityMagnitude || request.priority() > kMaxPriorityMagnitude) {
    return absl::InvalidArgumentError(absl::StrCat("priority: must be in [", -kMaxPriorityMagnitude,
                                                   ", ", kMaxPriorityMagnitude, "], got ",
                                                   request.priority()));
  }
  out.priority = request.priority();
  return absl::OkStatus();
}

// Token budget, stop token ids and stop strings (matched on the text, so
// only with a tokenizer). Fills the stopping fields of `out`.
absl::Status ValidateStopping(const pagoda::v1::StoppingCriteria& stopping,
                              const ModelLimits& limits, bool has_tokenizer,
                              ValidatedRequest& out) {
  if (stopping.max_tokens() < 0) {
    return Invalid(absl::StrCat("stopping.max_tokens: must be >= 0 (0 = ", kDefaultMaxTokens,
                                "), got ", stopping.max_tokens()));
  }
  out.stopping.max_tokens = stopping.max_tokens() == 0 ? kDefaultMaxTokens : stopping.max_tokens();
  // The generation config's cap (vLLM's override_max_tokens), at every door.
  if (limits.defaults.max_tokens_cap.has_value()) {
    out.stopping.max_tokens = std::min(out.stopping.max_tokens, *limits.defaults.max_tokens_cap);
  }
  if (stopping.min_tokens() < 0 || stopping.min_tokens() > out.stopping.max_tokens) {
    return Invalid(absl::StrCat("stopping.min_tokens: must be in [0, max_tokens = ",
                                out.stopping.max_tokens, "], got ", stopping.min_tokens()));
  }
  out.stopping.min_tokens = stopping.min_tokens();
  for (int i = 0; i < stopping.stop_token_ids_size(); ++i) {
    const int32_t id = stopping.stop_token_ids(i);
    if (id < 0 || id >= limits.vocab_size) {
      return Invalid(absl::StrFormat("stopping.stop_token_ids[%d]: token id %d is outside [0, %d)",
                                     i, id, limits.vocab_size));
    }
    out.stopping.stop_token_ids.push_back(id);
  }
  out.stopping.ignore_eos = stopping.ignore_eos();
  out.stop_strings.assign(stopping.stop().begin(), stopping.stop().end());
  absl::Status stop_strings = CheckStopStrings(out.stop_strings, has_tokenizer, "stopping.stop");
  if (!stop_strings.ok()) return stop_strings;
  out.include_stop_str_in_output = stopping.include_stop_str_in_output();
  return absl::OkStatus();
}

}  // namespace

SamplingOptions EffectiveSampling(const pagoda::v1::SamplingParams& sampling,
                                  const SamplingDefaults& model_defaults) {
  // Beams are not sampled: the model's sampling defaults do not apply.
  const SamplingDefaults& defaults =
      sampling.use_beam_search() ? SamplingDefaults{} : model_defaults;
  SamplingOptions out;
  out.temperature =
      sampling.has_temperature() ? sampling.temperature() : defaults.temperature.value_or(0.0f);
  out.top_k = sampling.has_top_k() ? sampling.top_k() : defaults.top_k.value_or(0);
  out.top_p = sampling.has_top_p() ? sampling.top_p() : defaults.top_p.value_or(1.0f);
  return out;
}

int64_t MaxPromptBytes(const ModelLimits& limits) {
  return static_cast<int64_t>(limits.max_model_len) * kMaxPromptBytesPerToken;
}

int64_t MaxRequestBytes(const ModelLimits& limits) {
  constexpr int64_t kOtherFieldsBytes = 64 << 10;  // Ids, sampling, stop ids: bounded.
  const int64_t token_ids = static_cast<int64_t>(limits.max_model_len) * 5;
  // Logits processing: logit_bias entries (a map entry is at most 14 bytes),
  // allowed_token_ids (up to the vocabulary) and bad words.
  const int64_t processing = int64_t{kMaxLogitBiasEntries} * 16 +
                             static_cast<int64_t>(limits.vocab_size) * 5 +
                             int64_t{kMaxBadWords} * (kMaxBadWordBytes + 3);
  return std::max(MaxPromptBytes(limits), token_ids) + kOtherFieldsBytes + kMaxStopTokenIds * 5 +
         processing + static_cast<int64_t>(kMaxConstraintRequestBytes);
}

namespace {

// A seed no two processes share (std::random_device reads the kernel's
// entropy), unlike --seed.
uint64_t ProcessRandomSeed() {
  std::random_device device;
  return (uint64_t{device()} << 32) | device();
}

}  // namespace

RequestValidator::RequestValidator(ModelLimits limits, const Tokenizer* tokenizer, uint64_t seed)
    : limits_(limits),
      tokenizer_(tokenizer),
      constraints_(limits_.token_vocabulary),
      rng_(seed),
      id_rng_(ProcessRandomSeed()) {}

absl::Status RequestValidator::ValidateConstraint(const pagoda::v1::GenerateRequest& request,
                                                  ValidatedRequest& out) {
  absl::StatusOr<std::shared_ptr<const constraints::CompiledGrammar>> grammar =
      constraints_.Compile(request);
  if (!grammar.ok()) return grammar.status();
  if (request.has_constraint_after_token_id()) {
    if (*grammar == nullptr) return Invalid("constraint_after_token_id: needs a constraint");
    const int32_t token = request.constraint_after_token_id();
    if (token < 0 || token >= limits_.vocab_size) {
      return Invalid(absl::StrCat("constraint_after_token_id: must be in [0, ", limits_.vocab_size,
                                  "), got ", token));
    }
    out.sampling.grammar_after_token = token;
  }
  if (*grammar == nullptr) return absl::OkStatus();
  // Each of these would fight the grammar over which tokens may come. (Beam
  // search takes one: each beam's candidates come from its own mask.)
  if (!out.sampling.allowed_token_ids.empty()) {
    return Invalid("sampling.allowed_token_ids: not supported with a constraint");
  }
  if (out.stopping.ignore_eos) {
    return Invalid("stopping.ignore_eos: not supported with a constraint (EOS ends the text "
                   "where the grammar may end)");
  }
  out.sampling.grammar = *std::move(grammar);
  return absl::OkStatus();
}

uint64_t RequestValidator::NextRandom() {
  absl::MutexLock lock(&mu_);
  return rng_();
}

absl::StatusOr<ValidatedRequest> RequestValidator::Validate(
    const pagoda::v1::GenerateRequest& request) {
  if (absl::Status bounds = CheckInputBounds(request, limits_); !bounds.ok()) return bounds;
  ValidatedRequest out;
  if (!request.lora_name().empty()) {
    if (absl::Status name = lora::CheckLoraName(request.lora_name()); !name.ok()) {
      return Invalid(absl::StrCat("lora_name: ", name.message()));
    }
    out.lora_name = request.lora_name();
  }
  absl::Status prompt = ResolvePrompt(request, limits_, tokenizer_, out.prompt_token_ids);
  if (!prompt.ok()) return prompt;
  if (absl::Status sampling = ValidateSampling(request, limits_, tokenizer_, out.sampling);
      !sampling.ok()) {
    return sampling;
  }
  while (out.sampling.seed == 0) out.sampling.seed = NextRandom();
  absl::Status stopping = ValidateStopping(request.stopping(), limits_, tokenizer_ != nullptr, out);
  if (!stopping.ok()) return stopping;
  if (absl::Status priority = ValidatePriority(request, out); !priority.ok()) return priority;
  if (absl::Status constraint = ValidateConstraint(request, out); !constraint.ok()) {
    return constraint;
  }
  out.request_id = request.request_id();
  if (out.request_id.empty()) out.request_id = NewRequestId();
  return out;
}

std::string RequestValidator::NewRequestId() {
  absl::MutexLock lock(&mu_);
  // The random part keeps ids unique across server restarts: it comes from
  // id_rng_, seeded afresh by each process, not from --seed's rng_, which
  // would give every start the same ids (req-0-<same>, then OpenAI's
  // cmpl-req-0-<same>).
  return absl::StrFormat("req-%d-%016x", next_request_number_++, id_rng_());
}

}  // namespace pagoda::scheduler
