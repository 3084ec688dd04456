#ifndef PAGODA_SCHEDULER_ENGINE_TOKEN_COUNTS_H_
#define PAGODA_SCHEDULER_ENGINE_TOKEN_COUNTS_H_

// What the presence, frequency and repetition penalties (sampling_options.h)
// read of a sequence's tokens, which the step plan sends with each draw that
// has them: how often each token occurs in the output (TokenCounts) and the
// prompt's distinct tokens (DistinctTokens).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "scheduler/engine/generated_token.h"

namespace pagoda::scheduler {

// Counted on demand from where the last call stopped: only penalties read
// the counts, and a map update for every token of every request is a good
// part of the engine thread's work at large batches. A copy carries the
// counts with it (a forked sequence's).
class TokenCounts {
 public:
  // The counts of the tokens of `output`. REQUIRES: the output of the last
  // call is a prefix of `output` (tokens are only ever appended).
  const absl::flat_hash_map<int32_t, int32_t>& CountThrough(
      absl::Span<const GeneratedToken> output) {
    for (; num_counted_ < output.size(); ++num_counted_) ++counts_[output[num_counted_].token_id];
    return counts_;
  }

 private:
  absl::flat_hash_map<int32_t, int32_t> counts_;
  size_t num_counted_ = 0;  // output[0, this) are in the counts.
};

// The distinct tokens of `tokens`, ascending: the repetition penalty reads
// them at every step, so a group works them out of its prompt once.
inline std::vector<int32_t> DistinctTokens(std::vector<int32_t> tokens) {
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  return tokens;
}

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_TOKEN_COUNTS_H_
