#ifndef PAGODA_KERNELS_OPS_SAMPLING_H_
#define PAGODA_KERNELS_OPS_SAMPLING_H_

// Picks one token per row of logits, on the device, in one launch.
//
// Per row r (all row arrays are device memory of num_rows entries):
// - temperature < 1e-5 (vLLM's epsilon): greedy, the argmax of the raw
//   logits, lowest id on ties.
// - else: probabilities softmax(logits / temperature), restricted first to
//   top-k (every token whose logit >= the k-th largest; ties at the boundary
//   are kept, so more than k may survive), then to top-p (the fewest
//   highest-logit tokens whose renormalised mass reaches top_p, boundary ties
//   kept), then one draw from what is left.
// - The draw is a Gumbel-max race with Philox4x32-10 noise keyed by
//   (seeds[r], sample_indices[r]) and counted by token id: a row's result is
//   a function of its own logits and parameters only, never of the batch, the
//   grid or the run.
// - Log-probabilities are log_softmax of the RAW logits (no temperature, no
//   filtering): the sampled token's, and the num_logprobs largest, sorted by
//   logit descending, lowest id first on ties; of the processed logits for
//   a row that asks (processed_logprobs below).
// NaN logits count as -inf. One thread block per row; rows up to
// kMaxSamplingVocab tokens (top-p sums masses of up to 2^40 each in 64 bits;
// larger rows are rejected),
// designed for 128k-256k (a radix select over 8-bit digits, no sort).
//
// Thread safety: stateless; enqueues one kernel on `stream`.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/sampling_limits.h"

namespace pagoda::kernels {

using ::pagoda::kMaxTopLogprobs;
using ::pagoda::kMaxSamplingVocab;

struct TokenSamplingParams {
  const float* logits = nullptr;  // [num_rows, vocab_size], row r at logits + r * logits_stride
  int64_t logits_stride = 0;
  int num_rows = 0;
  int vocab_size = 0;
  const float* temperatures = nullptr;  // required
  const int32_t* top_k = nullptr;       // optional; <= 0 or >= vocab_size means off
  const float* top_p = nullptr;         // optional; <= 0 or >= 1 means off
  const uint64_t* seeds = nullptr;      // required (read only by non-greedy rows)
  // Which draw of the sequence this is (e.g. its output length so far): the
  // same (seed, index) gives the same token for the same logits.
  const uint64_t* sample_indices = nullptr;
  int num_logprobs = 0;  // 0..kMaxTopLogprobs

  int32_t* sampled_ids = nullptr;     // [num_rows], required
  float* sampled_logprobs = nullptr;  // [num_rows], optional
  int32_t* top_ids = nullptr;         // [num_rows, num_logprobs], when num_logprobs > 0
  float* top_logprobs = nullptr;      // [num_rows, num_logprobs], when num_logprobs > 0
  int32_t* num_candidates = nullptr;  // [num_rows], optional: tokens left after filtering
  // Optional: the processed rows (kernels/ops/logits_processing.h), [num_rows,
  // vocab_size] dense. When set, the argmax, min_p, top-k, top-p and the draw
  // read them, and the logprobs still the raw `logits`; a row whose
  // processed logits are all -inf takes its raw argmax.
  const float* sampling_logits = nullptr;
  // Optional, [num_rows], read only with sampling_logits: a non-zero entry
  // makes that row's logprobs (the sampled token's and the top ones)
  // log_softmax of its processed row instead of the raw one (beam search:
  // masked tokens -inf, the rest renormalised), unless the processed row is
  // all -inf.
  const uint8_t* processed_logprobs = nullptr;
  // Optional, [num_rows]: min_p in [0, 1] (0 = off), after temperature:
  // tokens with (x - max) / T < logf(min_p) are cut (PassesMinP), before
  // top-k and top-p.
  const float* min_p = nullptr;
};
cudaError_t LaunchTokenSampling(const TokenSamplingParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_SAMPLING_H_
