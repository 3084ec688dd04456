#ifndef PAGODA_SCHEDULER_ENGINE_SAMPLING_OPTIONS_H_
#define PAGODA_SCHEDULER_ENGINE_SAMPLING_OPTIONS_H_

// What a request asks of its generation, once validated: how to pick each
// token (SamplingOptions, vLLM's SamplingParams) and when to stop
// (StoppingOptions). Values the scheduler carries and the step plan and
// output processor read; kept apart from the sequences they apply to.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "scheduler/constraints/compiled_grammar.h"

namespace pagoda::scheduler {

// Per-request decoding options, already validated and with defaults filled in
// (the frontend turns zero values into defaults).
struct SamplingOptions {
  float temperature = 0.0f;  // < 1e-5 = greedy.
  int top_k = 0;             // 0 = off.
  float top_p = 1.0f;
  uint64_t seed = 0;  // Always set: the frontend picks one when the client did not.
  int n = 1;          // Sequences returned.
  int best_of = 1;    // Sequences generated (>= n); the beam width with beam search.
  bool use_beam_search = false;
  float length_penalty = 1.0f;  // Beam score = cumulative logprob / length^penalty.
  bool early_stopping = false;  // Beam search stops once best_of beams finished.
  int num_logprobs = 0;
  // Logits processing (common/logits_processing.h has the order).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;                    // 1 = off.
  float min_p = 0.0f;                                 // 0 = off.
  std::vector<std::pair<int32_t, float>> logit_bias;  // Sorted by token id.
  std::vector<int32_t> allowed_token_ids;             // Empty = all.
  // Each bad word as token sequences (with and without a leading space).
  std::vector<std::vector<int32_t>> bad_words_token_ids;
  // Structured outputs: the grammar every sequence's output must follow
  // (null for none), compiled by the frontend and shared.
  std::shared_ptr<const constraints::CompiledGrammar> grammar;
  // With a grammar: it binds the output only after the first time this
  // token is generated (a reasoning model's </think>: vLLM lets the model
  // think freely, then holds the answer to the grammar); -1: from the first.
  int32_t grammar_after_token = -1;
  // Prompt logprobs (vLLM's prompt_logprobs): -1 = none, else each prompt
  // token's logprob with this many top logprobs (0..kMaxTopLogprobs).
  int num_prompt_logprobs = -1;

  bool wants_prompt_logprobs() const { return num_prompt_logprobs >= 0; }
  bool has_penalties() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
  // Bad words of more than one token: their ban reads the output's last
  // tokens, so under overlap it follows the plan (BuildStepMasks).
  int num_multi_token_bad_words() const;
};

// Seed of the index-th sequence of a request whose seed is request_seed:
// the request seed itself for index 0 (so n = 1 is unchanged), a SplitMix64
// mix of both otherwise, so siblings draw differently and each sequence is
// reproducible whatever else shares its batch.
uint64_t SeedForSequence(uint64_t request_seed, int index);

struct StoppingOptions {
  int max_tokens = 16;
  int min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;

  // Whether `token`, a sequence's `num_output_tokens`-th output token, ends
  // it: an EOS id (unless ignored) or a stop id, never before min_tokens.
  // The one rule for sampling and beam search alike.
  bool StopsAt(const std::vector<int32_t>& eos_token_ids, int num_output_tokens,
               int32_t token) const;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_SAMPLING_OPTIONS_H_
