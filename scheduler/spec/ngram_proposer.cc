#include "scheduler/spec/ngram_proposer.h"

#include <algorithm>

namespace pagoda::scheduler {
namespace {

// How many of the last tokens the tokens ending at `end` repeat, up to
// `max_n` (and up to end + 1, the tokens there are).
int SuffixMatchEndingAt(absl::Span<const int32_t> tokens, int end, int max_n) {
  const int last = static_cast<int>(tokens.size()) - 1;
  const int bound = std::min(max_n, end + 1);
  int n = 0;
  while (n < bound && tokens[end - n] == tokens[last - n]) ++n;
  return n;
}

}  // namespace

std::vector<int32_t> ProposeNgramDrafts(absl::Span<const int32_t> tokens,
                                        const NgramLookup& lookup) {
  const int total = static_cast<int>(tokens.size());
  const int room = std::min(lookup.num_speculative_tokens, lookup.max_model_len - total);
  if (total < lookup.min_n || room <= 0) return {};
  // Every occurrence ends at or before the second-to-last token, so at
  // least one token follows it; the earliest end wins ties.
  int longest = 0;
  int longest_end = -1;
  for (int end = 0; end + 1 < total; ++end) {
    const int n = SuffixMatchEndingAt(tokens, end, lookup.max_n);
    if (n > longest) {
      longest = n;
      longest_end = end;
      if (n == lookup.max_n) break;  // Nothing longer, nothing earlier.
    }
  }
  if (longest < lookup.min_n) return {};
  const int first = longest_end + 1;
  const int count = std::min(room, total - first);
  return std::vector<int32_t>(tokens.begin() + first, tokens.begin() + first + count);
}

}  // namespace pagoda::scheduler
