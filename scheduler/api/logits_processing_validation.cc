#include "scheduler/api/logits_processing_validation.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"

namespace pagoda::scheduler {
namespace {

absl::Status Refuse(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckPenalty(const char* field, float value) {
  if (!(std::abs(value) <= kMaxAbsPenalty)) {
    return Refuse(absl::StrCat("sampling.", field, ": must be in [-", kMaxAbsPenalty, ", ",
                                kMaxAbsPenalty, "] (0 = off), got ", value));
  }
  return absl::OkStatus();
}

absl::Status CheckTokenId(const std::string& field, int64_t id, const ModelLimits& limits) {
  if (id < 0 || id >= limits.vocab_size) {
    return Refuse(absl::StrCat(field, ": token id ", id, " is outside [0, ", limits.vocab_size,
                                ")"));
  }
  return absl::OkStatus();
}

// Penalties and min_p, with the model's defaults for unset ones.
absl::Status ValidateScalars(const pagoda::v1::SamplingParams& sampling,
                             const ModelLimits& limits, SamplingOptions& out) {
  // Beams are not sampled: the model's sampling defaults do not apply.
  const SamplingDefaults defaults = out.use_beam_search ? SamplingDefaults{} : limits.defaults;
  for (const auto& [field, value] :
       {std::pair{"presence_penalty", sampling.presence_penalty()},
        std::pair{"frequency_penalty", sampling.frequency_penalty()}}) {
    if (absl::Status status = CheckPenalty(field, value); !status.ok()) return status;
  }
  const float repetition = sampling.has_repetition_penalty()
                               ? sampling.repetition_penalty()
                               : defaults.repetition_penalty.value_or(1.0f);
  if (repetition != 0 &&
      !(repetition >= kMinRepetitionPenalty && repetition <= kMaxRepetitionPenalty)) {
    return Refuse(absl::StrCat("sampling.repetition_penalty: must be 0 (off) or in [",
                                kMinRepetitionPenalty, ", ", kMaxRepetitionPenalty, "], got ",
                                repetition));
  }
  const float min_p =
      sampling.has_min_p() ? sampling.min_p() : defaults.min_p.value_or(0.0f);
  if (!(min_p >= 0 && min_p <= 1)) {
    return Refuse(absl::StrCat("sampling.min_p: must be in [0, 1] (0 = off), got ", min_p));
  }
  out.presence_penalty = sampling.presence_penalty();
  out.frequency_penalty = sampling.frequency_penalty();
  out.repetition_penalty = repetition == 0 ? 1.0f : repetition;
  out.min_p = min_p;
  return absl::OkStatus();
}

absl::Status ValidateTokenLists(const pagoda::v1::SamplingParams& sampling,
                                const ModelLimits& limits, SamplingOptions& out) {
  for (const auto& [id, bias] : sampling.logit_bias()) {
    const std::string field = absl::StrCat("sampling.logit_bias[", id, "]");
    if (absl::Status status = CheckTokenId(field, id, limits); !status.ok()) return status;
    if (!(std::abs(bias) <= kMaxAbsLogitBias)) {
      return Refuse(absl::StrCat(field, ": bias must be in [-", kMaxAbsLogitBias, ", ",
                                  kMaxAbsLogitBias, "], got ", bias));
    }
    out.logit_bias.emplace_back(id, bias);
  }
  std::sort(out.logit_bias.begin(), out.logit_bias.end());
  for (int i = 0; i < sampling.allowed_token_ids_size(); ++i) {
    const int32_t id = sampling.allowed_token_ids(i);
    absl::Status status =
        CheckTokenId(absl::StrCat("sampling.allowed_token_ids[", i, "]"), id, limits);
    if (!status.ok()) return status;
    out.allowed_token_ids.push_back(id);
  }
  std::sort(out.allowed_token_ids.begin(), out.allowed_token_ids.end());
  out.allowed_token_ids.erase(
      std::unique(out.allowed_token_ids.begin(), out.allowed_token_ids.end()),
      out.allowed_token_ids.end());
  return absl::OkStatus();
}

// vLLM v1's SamplingParams.update_from_tokenizer: each word without a
// leading space, and with one when that makes a different first token of
// the same length (the word in the middle of text).
absl::Status TokenizeBadWords(const pagoda::v1::SamplingParams& sampling,
                              const ModelLimits& limits, const Tokenizer& tokenizer,
                              SamplingOptions& out) {
  for (int i = 0; i < sampling.bad_words_size(); ++i) {
    const std::string field = absl::StrCat("sampling.bad_words[", i, "]");
    const std::string word(absl::StripLeadingAsciiWhitespace(sampling.bad_words(i)));
    if (word.empty()) return Refuse(absl::StrCat(field, ": empty"));
    std::vector<int32_t> previous;
    for (const bool leading_space : {false, true}) {
      absl::StatusOr<std::vector<int>> ids = tokenizer.Encode(leading_space ? " " + word : word);
      if (!ids.ok()) return Refuse(absl::StrCat(field, ": ", ids.status().message()));
      if (ids->empty()) continue;
      for (int id : *ids) {
        if (absl::Status status = CheckTokenId(field, id, limits); !status.ok()) return status;
      }
      std::vector<int32_t> tokens(ids->begin(), ids->end());
      if (leading_space &&
          (previous.empty() || tokens.front() == previous.front() ||
           tokens.size() != previous.size())) {
        continue;
      }
      out.bad_words_token_ids.push_back(tokens);
      previous = std::move(tokens);
    }
  }
  return absl::OkStatus();
}

bool UsesLogitsProcessing(const SamplingOptions& out) {
  return out.has_penalties() || out.min_p != 0 || !out.logit_bias.empty() ||
         !out.allowed_token_ids.empty() || !out.bad_words_token_ids.empty();
}

}  // namespace

absl::Status CheckLogitsProcessingSizes(const pagoda::v1::SamplingParams& sampling,
                                        const ModelLimits& limits) {
  if (sampling.logit_bias_size() > kMaxLogitBiasEntries) {
    return Refuse(absl::StrCat("sampling.logit_bias: at most ", kMaxLogitBiasEntries,
                                " entries, got ", sampling.logit_bias_size()));
  }
  if (sampling.allowed_token_ids_size() > limits.vocab_size) {
    return Refuse(absl::StrCat("sampling.allowed_token_ids: at most vocab_size = ",
                                limits.vocab_size, " ids, got ",
                                sampling.allowed_token_ids_size()));
  }
  if (sampling.bad_words_size() > kMaxBadWords) {
    return Refuse(absl::StrCat("sampling.bad_words: at most ", kMaxBadWords, " words, got ",
                                sampling.bad_words_size()));
  }
  for (int i = 0; i < sampling.bad_words_size(); ++i) {
    if (sampling.bad_words(i).size() > static_cast<size_t>(kMaxBadWordBytes)) {
      return Refuse(absl::StrCat("sampling.bad_words[", i, "]: at most ", kMaxBadWordBytes,
                                  " bytes, got ", sampling.bad_words(i).size()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateLogitsProcessing(const pagoda::v1::SamplingParams& sampling,
                                      const ModelLimits& limits, const Tokenizer* tokenizer,
                                      SamplingOptions& out) {
  if (absl::Status status = ValidateScalars(sampling, limits, out); !status.ok()) return status;
  if (absl::Status status = ValidateTokenLists(sampling, limits, out); !status.ok()) {
    return status;
  }
  if (sampling.bad_words_size() > 0) {
    if (tokenizer == nullptr) {
      return Refuse("sampling.bad_words: this model has no tokenizer");
    }
    absl::Status status = TokenizeBadWords(sampling, limits, *tokenizer, out);
    if (!status.ok()) return status;
  }
  if (out.use_beam_search && UsesLogitsProcessing(out)) {
    return Refuse(
        "sampling.use_beam_search: penalties, min_p, logit_bias, allowed_token_ids and "
        "bad_words do not apply to beam search");
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
