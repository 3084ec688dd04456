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

// The first position in [from, to) holding `token`, or `to`. Blocks of
// positions are tested without an early exit, which the compiler turns into
// vector compares: a long context is mostly positions that cannot end a
// match (their token is not the last one), and the scan of a 8k-token
// context took 81 us a step one token at a time.
int FindToken(absl::Span<const int32_t> tokens, int from, int to, int32_t token) {
  constexpr int kBlock = 16;
  int i = from;
  for (; i + kBlock <= to; i += kBlock) {
    bool any = false;
    for (int j = 0; j < kBlock; ++j) any |= tokens[i + j] == token;
    if (any) break;
  }
  for (; i < to; ++i) {
    if (tokens[i] == token) return i;
  }
  return to;
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
  // Only a position holding the last token can end a match.
  const int32_t last_token = tokens[total - 1];
  for (int end = FindToken(tokens, 0, total - 1, last_token); end + 1 < total;
       end = FindToken(tokens, end + 1, total - 1, last_token)) {
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
