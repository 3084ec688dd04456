// Request validation, the one for every front door: a pagoda.v1
// GenerateRequest checked against the model's limits and turned into the
// engine's options.
#ifndef PAGODA_SCHEDULER_API_REQUEST_VALIDATION_H_
#define PAGODA_SCHEDULER_API_REQUEST_VALIDATION_H_

// RequestValidator: a wire request (pagoda.v1 or translated from OpenAI or
// vLLM) checked field by field against the model's limits and turned into the
// engine's request. Every field is hostile: bounded before use.

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/sampling_limits.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/constraint_compiler.h"
#include "scheduler/api/model_limits.h"
#include "scheduler/engine/sequence.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {

// Most sequences one request may ask for (n, best_of): the same bound for
// every front door (OpenAI's n copies of a greedy answer included).
inline constexpr int kMaxSequences = 32;

// Longest request_id accepted: it is copied into every streamed message.
inline constexpr size_t kMaxRequestIdBytes = 256;
// |priority| bound: wide enough for any ranking scheme, narrow enough that
// no arithmetic on it can overflow.
inline constexpr int kMaxPriorityMagnitude = 1'000'000;
// Text per token assumed when bounding a text prompt before tokenizing it: a
// token of a real vocabulary covers far fewer bytes, so a prompt over
// MaxPromptBytes() could never fit max_model_len tokens.
inline constexpr int64_t kMaxPromptBytesPerToken = 32;

// Temperature, top_k and top_p in force for `sampling`: the request's when
// set, else the model's default (generation_config.json), else the API's
// (greedy, off, 1); under beam search the request's only. Every front door
// reads the effective values here (OpenAI's greedy copies of n included).
SamplingOptions EffectiveSampling(const pagoda::v1::SamplingParams& sampling,
                                  const SamplingDefaults& model_defaults);

// The longest text prompt (bytes) worth tokenizing under `limits`.
int64_t MaxPromptBytes(const ModelLimits& limits);

// The largest GenerateRequest a server must receive under `limits`: the
// longest text prompt or max_model_len token ids (5 bytes each at most), and
// room for the other (bounded) fields. Servers refuse bigger messages
// (RESOURCE_EXHAUSTED) before parsing them.
int64_t MaxRequestBytes(const ModelLimits& limits);

// A request that passed validation, with every default filled in.
struct ValidatedRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingOptions sampling;
  StoppingOptions stopping;
  // Matched on the output text by the frontend (RequestOutput), not the engine.
  std::vector<std::string> stop_strings;
  bool include_stop_str_in_output = false;
  int priority = 0;
  // The LoRA adapter the request names ("" = the base model): a valid name,
  // not yet looked up (RequestPath::Submit resolves it, once).
  std::string lora_name;
};

// Turns a client GenerateRequest into scheduler options, or explains why not.
// INVALID_ARGUMENT messages start with the offending field's name. Several
// sequences: n in [1, 32], best_of in [n, 32] (beam search: width best_of
// <= 10, since the worker returns at most 20 top logprobs, and temperature
// 0 with top_k/top_p off); best_of > 1 without beam search needs
// temperature > 0; length_penalty (0 = 1) in [-10, 10], beam search only.
// A constraint (json_schema, regex, choice, grammar, json_object) is
// compiled here (ConstraintCompiler) and refused with allowed_token_ids or
// ignore_eos; beam search takes one.
// Every bound is checked before any work on the field: a text prompt's length
// before it is tokenized, the number of token ids before they are read.
// Thread-safe.
class RequestValidator {
 public:
  // `tokenizer` may be null (token-id prompts only); if not, it must outlive
  // the validator. `seed` seeds the generator that picks seeds for requests
  // that bring none; generated request ids take their random suffix from a
  // generator seeded afresh in each process, so they never repeat across
  // restarts.
  RequestValidator(ModelLimits limits, const Tokenizer* tokenizer, uint64_t seed);

  absl::StatusOr<ValidatedRequest> Validate(const pagoda::v1::GenerateRequest& request);

  const ModelLimits& limits() const { return limits_; }

 private:
  uint64_t NextRandom();
  // "req-<number>-<random>" for a request that brings no id.
  std::string NewRequestId();

  // Structured outputs: the request's constraint compiled (and cached);
  // refused with allowed_token_ids or ignore_eos.
  absl::Status ValidateConstraint(const pagoda::v1::GenerateRequest& request,
                                  ValidatedRequest& out);

  const ModelLimits limits_;
  const Tokenizer* const tokenizer_;
  ConstraintCompiler constraints_;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 id_rng_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_number_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_VALIDATION_H_
