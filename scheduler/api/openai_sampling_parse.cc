#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/sampling_limits.h"
#include "scheduler/api/field_error.h"
#include "scheduler/api/openai_body_parts.h"
#include "scheduler/api/request_validation.h"

namespace pagoda::scheduler::openai_body {
namespace {

absl::Status ParseStop(const json& body, pagoda::v1::StoppingCriteria* stopping) {
  if (Present(body, "stop")) {
    const json& stop = body["stop"];
    if (stop.is_string()) {
      stopping->add_stop(stop.get<std::string>());
    } else if (stop.is_array()) {
      for (const json& entry : stop) {
        if (!entry.is_string())
          return InvalidField("stop", "must be a string or an array of strings");
        stopping->add_stop(entry.get<std::string>());
        if (stopping->stop_size() > 64) return InvalidField("stop", "too many stop strings");
      }
    } else {
      return InvalidField("stop", "must be a string or an array of strings");
    }
  }
  if (Present(body, "stop_token_ids")) {
    if (!body["stop_token_ids"].is_array() || body["stop_token_ids"].size() > 1024) {
      return InvalidField("stop_token_ids", "must be an array of at most 1024 token ids");
    }
    for (const json& id : body["stop_token_ids"]) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidField("stop_token_ids", "must hold token ids");
      }
      stopping->add_stop_token_ids(id.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

// vLLM's beam search fields: use_beam_search, best_of (the width; without
// beam search only 1), length_penalty, early_stopping. Passed through as
// the gRPC fields; the validator bounds them and requires temperature 0.
// Returns whether the body asks for beam search.
absl::StatusOr<bool> ParseBeamSearch(const json& body, pagoda::v1::SamplingParams* sampling) {
  absl::StatusOr<bool> use_beam_search = Boolean(body, "use_beam_search", false);
  if (!use_beam_search.ok()) return use_beam_search.status();
  const bool beam = *use_beam_search;
  absl::StatusOr<int64_t> best_of = Integer(body, "best_of", 0, beam ? 0 : 1, beam ? 128 : 1);
  if (!best_of.ok()) {
    return beam ? best_of.status()
                : InvalidField("best_of", "is only supported with use_beam_search");
  }
  absl::StatusOr<bool> early_stopping = Boolean(body, "early_stopping", false);
  if (!early_stopping.ok()) return early_stopping.status();
  absl::StatusOr<double> length_penalty =
      Number(body, "length_penalty", 1.0, -kFloatMax, kFloatMax);
  if (!length_penalty.ok()) return length_penalty.status();
  if (!beam) return false;
  sampling->set_use_beam_search(true);
  sampling->set_best_of(static_cast<int32_t>(*best_of));
  sampling->set_length_penalty(static_cast<float>(*length_penalty));
  sampling->set_early_stopping(*early_stopping);
  return true;
}

// logit_bias ({"token id": bias}, OpenAI's string keys), allowed_token_ids
// and bad_words (vLLM's extra parameters). Values are bounded again by the
// validator, which names the gRPC field.
absl::Status ParseTokenLists(const json& body, pagoda::v1::SamplingParams* sampling) {
  if (Present(body, "logit_bias")) {
    const json& bias = body["logit_bias"];
    if (!bias.is_object() || bias.size() > static_cast<size_t>(kMaxLogitBiasEntries)) {
      return InvalidField("logit_bias",
                          absl::StrCat("must be an object of at most ", kMaxLogitBiasEntries,
                                       " token id: bias entries"));
    }
    for (const auto& [key, value] : bias.items()) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(key, &id) || id < 0) {
        return InvalidField("logit_bias",
                            absl::StrCat("key \"", key.substr(0, 32), "\" is not a token id"));
      }
      if (!value.is_number()) return InvalidField("logit_bias", "values must be numbers");
      (*sampling->mutable_logit_bias())[id] = value.get<float>();
    }
  }
  if (Present(body, "allowed_token_ids")) {
    const json& ids = body["allowed_token_ids"];
    if (!ids.is_array() || ids.size() > kMaxPromptTokenIds) {
      return InvalidField("allowed_token_ids", "must be an array of token ids");
    }
    for (const json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        return InvalidField("allowed_token_ids", "must hold token ids");
      }
      sampling->add_allowed_token_ids(id.get<int32_t>());
    }
  }
  if (Present(body, "bad_words")) {
    const json& words = body["bad_words"];
    if (!words.is_array() || words.size() > static_cast<size_t>(kMaxBadWords)) {
      return InvalidField("bad_words",
                          absl::StrCat("must be an array of at most ", kMaxBadWords, " strings"));
    }
    for (const json& word : words) {
      if (!word.is_string()) return InvalidField("bad_words", "must hold strings");
      sampling->add_bad_words(word.get<std::string>());
    }
  }
  return absl::OkStatus();
}

// Penalties and min_p; absent ones stay unset (the model's defaults apply).
absl::Status ParsePenalties(const json& body, pagoda::v1::SamplingParams* sampling) {
  absl::StatusOr<double> presence =
      Number(body, "presence_penalty", 0.0, -kMaxAbsPenalty, kMaxAbsPenalty);
  if (!presence.ok()) return presence.status();
  sampling->set_presence_penalty(static_cast<float>(*presence));
  absl::StatusOr<double> frequency =
      Number(body, "frequency_penalty", 0.0, -kMaxAbsPenalty, kMaxAbsPenalty);
  if (!frequency.ok()) return frequency.status();
  sampling->set_frequency_penalty(static_cast<float>(*frequency));
  if (Present(body, "repetition_penalty")) {
    absl::StatusOr<double> repetition =
        Number(body, "repetition_penalty", 1.0, 0.0, kMaxRepetitionPenalty);
    if (!repetition.ok()) return repetition.status();
    sampling->set_repetition_penalty(static_cast<float>(*repetition));
  }
  if (Present(body, "min_p")) {
    absl::StatusOr<double> min_p = Number(body, "min_p", 0.0, 0.0, 1.0);
    if (!min_p.ok()) return min_p.status();
    sampling->set_min_p(static_cast<float>(*min_p));
  }
  return ParseTokenLists(body, sampling);
}

// vLLM's prompt_logprobs field, and completions' echo with logprobs (the
// prompt's logprobs, OpenAI's legacy shape); neither in a stream, whose
// chunks carry only the choices' new text.
absl::Status ParsePromptLogprobs(const json& body, OpenAiRequest* out) {
  absl::StatusOr<int64_t> prompt = Integer(body, "prompt_logprobs", -1, 0, kMaxTopLogprobs);
  if (!prompt.ok()) return prompt.status();
  int top = static_cast<int>(*prompt);
  out->vllm_prompt_logprobs = top >= 0;
  if (out->echo && out->top_logprobs >= 0) top = std::max(top, out->top_logprobs);
  if (top < 0) return absl::OkStatus();
  if (Present(body, "stream") && body["stream"].is_boolean() && body["stream"].get<bool>()) {
    return InvalidField(out->vllm_prompt_logprobs ? "prompt_logprobs" : "echo",
                        "prompt logprobs are not supported in a stream");
  }
  out->generate.set_prompt_logprobs(top);
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseSampling(const json& body, const SamplingDefaults& defaults, OpenAiRequest* out) {
  pagoda::v1::SamplingParams* sampling = out->generate.mutable_sampling();
  absl::StatusOr<bool> beam = ParseBeamSearch(body, sampling);
  if (!beam.ok()) return beam.status();
  // Absent: the model's default when it has one (the validator fills it),
  // else OpenAI's 1; with beam search, 0 (beams are not sampled).
  if (Present(body, "temperature") || (!defaults.temperature.has_value() && !*beam)) {
    absl::StatusOr<double> temperature = Number(body, "temperature", 1.0, -kFloatMax, kFloatMax);
    if (!temperature.ok()) return temperature.status();
    sampling->set_temperature(static_cast<float>(*temperature));
  }
  if (Present(body, "top_p")) {
    absl::StatusOr<double> top_p = Number(body, "top_p", 1.0, -kFloatMax, kFloatMax);
    if (!top_p.ok()) return top_p.status();
    // 0 is the proto's "unset" (1): over HTTP it is refused, as vLLM does.
    if (*top_p <= 0) return InvalidField("top_p", absl::StrCat("must be in (0, 1], got ", *top_p));
    sampling->set_top_p(static_cast<float>(*top_p));
  }
  if (Present(body, "top_k")) {
    absl::StatusOr<int64_t> top_k = Integer(body, "top_k", 0, -1, INT32_MAX);
    if (!top_k.ok()) return top_k.status();
    sampling->set_top_k(*top_k < 0 ? 0 : static_cast<int32_t>(*top_k));
  }
  // OpenAI's seed may be any integer; 0 here means "the server picks".
  absl::StatusOr<int64_t> seed = Integer(body, "seed", 0, 0, INT64_MAX);
  if (!seed.ok()) return seed.status();
  sampling->set_seed(static_cast<uint64_t>(*seed));
  // Passed through: the validator decides what n the engine supports.
  absl::StatusOr<int64_t> n = Integer(body, "n", 1, 1, kMaxSequences);
  if (!n.ok()) return n.status();
  // Greedy samples are all the same sequence: run one and copy it (vLLM
  // answers n equal choices; the engine refuses several greedy sequences).
  if (*n > 1 && !*beam && EffectiveSampling(*sampling, defaults).temperature < kGreedyTemperature) {
    out->copies = static_cast<int>(*n);
    sampling->set_n(1);
  } else {
    sampling->set_n(static_cast<int32_t>(*n));
  }
  return ParsePenalties(body, sampling);
}

// vLLM's extra body field; the validator bounds it.
absl::Status ParsePriority(const json& body, OpenAiRequest* out) {
  absl::StatusOr<int64_t> priority = Integer(body, "priority", 0, INT32_MIN, INT32_MAX);
  if (!priority.ok()) return priority.status();
  out->generate.set_priority(static_cast<int32_t>(*priority));
  return absl::OkStatus();
}

absl::Status ParseLogprobs(const json& body, OpenAiRequest* out) {
  if (out->chat) {
    absl::StatusOr<bool> logprobs = Boolean(body, "logprobs", false);
    if (!logprobs.ok()) return logprobs.status();
    absl::StatusOr<int64_t> top = Integer(body, "top_logprobs", 0, 0, kMaxTopLogprobs);
    if (!top.ok()) return top.status();
    if (*logprobs) out->top_logprobs = static_cast<int>(*top);
  } else {
    absl::StatusOr<int64_t> top = Integer(body, "logprobs", -1, 0, kMaxTopLogprobs);
    if (!top.ok()) return top.status();
    out->top_logprobs = static_cast<int>(*top);
  }
  // The engine returns the sampled token's logprob with its top list, so
  // ask for at least one entry.
  if (out->top_logprobs >= 0) out->generate.set_logprobs(std::max(1, out->top_logprobs));
  return ParsePromptLogprobs(body, out);
}

absl::Status ParseStopping(const json& body, int default_max_tokens, OpenAiRequest* out) {
  pagoda::v1::StoppingCriteria* stopping = out->generate.mutable_stopping();
  const char* max_key =
      Present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  absl::StatusOr<int64_t> max_tokens = Integer(body, max_key, default_max_tokens, 1, INT32_MAX);
  if (!max_tokens.ok()) return max_tokens.status();
  stopping->set_max_tokens(static_cast<int32_t>(*max_tokens));
  absl::StatusOr<int64_t> min_tokens = Integer(body, "min_tokens", 0, 0, INT32_MAX);
  if (!min_tokens.ok()) return min_tokens.status();
  stopping->set_min_tokens(static_cast<int32_t>(*min_tokens));
  if (Present(body, "ignore_eos")) {
    if (!body["ignore_eos"].is_boolean()) return InvalidField("ignore_eos", "must be a boolean");
    stopping->set_ignore_eos(body["ignore_eos"].get<bool>());
  }
  absl::StatusOr<bool> include_stop = Boolean(body, "include_stop_str_in_output", false);
  if (!include_stop.ok()) return include_stop.status();
  stopping->set_include_stop_str_in_output(*include_stop);
  return ParseStop(body, stopping);
}

absl::Status ParseStreaming(const json& body, OpenAiRequest* out) {
  if (Present(body, "stream")) {
    if (!body["stream"].is_boolean()) return InvalidField("stream", "must be a boolean");
    out->stream = body["stream"].get<bool>();
  }
  if (Present(body, "stream_options")) {
    const json& options = body["stream_options"];
    if (!options.is_object()) return InvalidField("stream_options", "must be an object");
    if (!out->stream) return InvalidField("stream_options", "only allowed when stream is true");
    for (const char* key : {"include_usage", "continuous_usage_stats"}) {
      if (Present(options, key) && !options[key].is_boolean()) {
        return InvalidField(absl::StrCat("stream_options.", key), "must be a boolean");
      }
    }
    out->include_usage = Boolean(options, "include_usage", false).value_or(false);
    out->continuous_usage_stats = Boolean(options, "continuous_usage_stats", false).value_or(false);
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler::openai_body
