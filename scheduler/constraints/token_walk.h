#ifndef PAGODA_SCHEDULER_CONSTRAINTS_TOKEN_WALK_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_TOKEN_WALK_H_

// Which tokens a grammar allows from a parser state, found by walking the
// sorted vocabulary as a trie: the stacks after each prefix are kept per
// depth, a token starts from the depth it shares with the previous one, and
// a prefix the grammar refuses skips every token below it.
//
// Two uses. Precompute (StateTokens::Compute): from one automaton state over
// an unknown caller (kOutsideFrame), every token is accepted (its bytes stay
// inside the state's rule, or leave it exactly at their end), rejected, or
// uncertain (the rule may end before the token does, and the next byte can
// follow the rule: only the real stack can tell). At run time
// (AddAcceptedCandidates): the uncertain tokens of a state are walked again
// from the real stack.

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "scheduler/constraints/automaton.h"
#include "scheduler/constraints/stack_set.h"
#include "scheduler/constraints/token_vocabulary.h"

namespace pagoda::constraints {

// What one automaton state allows whatever lies below it on the stack.
// Immutable once computed; thread-safe.
struct StateTokens {
  // The accepted tokens, in the smallest of three forms: their ids (sorted),
  // every byte token but the listed ids, or a mask.
  enum class Form : uint8_t { kIds, kAllBut, kBits };
  Form form = Form::kIds;
  std::vector<int32_t> ids;
  std::vector<uint32_t> bits;
  // Sorted vocabulary indices, ascending, of the uncertain tokens.
  std::vector<int32_t> uncertain;

  // Classifies every token of `vocabulary` at `state`.
  static StateTokens Compute(const Automaton& automaton, const TokenVocabulary& vocabulary,
                             int32_t state);
  // ORs the accepted tokens into `mask` (vocabulary.mask_words() words);
  // `scratch` is as large and is overwritten.
  void AddAccepted(const TokenVocabulary& vocabulary, uint32_t* mask, uint32_t* scratch) const;
};

// Walks tokens from a stack set. Holds the per-depth scratch; one per parser.
class TokenWalker {
 public:
  enum class Outcome : uint8_t { kAccepted, kUncertain, kRejected };

  TokenWalker(StackStepper& stepper, const TokenVocabulary& vocabulary)
      : stepper_(stepper), vocabulary_(vocabulary) {}

  // Visits the tokens of `candidates` (sorted vocabulary indices,
  // ascending) from `start` and calls report(begin, end, outcome) for runs
  // [begin, end) of candidate positions with one outcome. `follow` (may be
  // null) is the byte set that decides kUncertain when start's rule ends
  // (start.left_rule) before a token does. `arena` is restored to its size
  // on entry.
  template <typename Report>
  void Walk(const StackSet& start, const ByteSet* follow, FrameArena& arena,
            absl::Span<const int32_t> candidates, Report&& report);

 private:
  // The tokens after run position p that share the first `length` bytes of
  // candidate p: the position of the first that does not.
  size_t SkipShared(absl::Span<const int32_t> candidates, size_t p, int length) const;

  StackStepper& stepper_;
  const TokenVocabulary& vocabulary_;
  std::vector<StackSet> levels_;
  std::vector<int32_t> marks_;         // Arena size at each level.
  std::vector<uint8_t> uncertain_;     // A rule end with a following byte before this depth.
};

// Sets in `mask` the bit of every token of `candidates` (sorted vocabulary
// indices, ascending) that `start` (a matcher's stacks, over kRootFrame)
// accepts.
void AddAcceptedCandidates(TokenWalker& walker, FrameArena& arena, const StackSet& start,
                           const TokenVocabulary& vocabulary,
                           absl::Span<const int32_t> candidates, uint32_t* mask);

// ---- Implementation of the template ----

template <typename Report>
void TokenWalker::Walk(const StackSet& start, const ByteSet* follow, FrameArena& arena,
                       absl::Span<const int32_t> candidates, Report&& report) {
  const int32_t arena_size = arena.size();
  if (levels_.empty()) levels_.resize(1);
  levels_[0] = start;
  marks_.assign(1, arena_size);
  uncertain_.assign(1, 0);
  int valid = 0;  // Levels 0..valid hold the previous token's prefix.
  std::string_view previous;
  size_t p = 0;
  while (p < candidates.size()) {
    const std::string_view bytes = vocabulary_.bytes(candidates[p]);
    const int length = static_cast<int>(bytes.size());
    int depth = 0;
    while (depth < valid && depth < static_cast<int>(previous.size()) && depth < length &&
           previous[depth] == bytes[depth]) {
      ++depth;
    }
    arena.Truncate(marks_[depth]);
    int dead_at = -1;
    for (int d = depth; d < length; ++d) {
      if (static_cast<int>(levels_.size()) <= d + 1) levels_.resize(d + 2);
      if (static_cast<int>(marks_.size()) <= d + 1) marks_.resize(d + 2), uncertain_.resize(d + 2);
      const uint8_t byte = static_cast<uint8_t>(bytes[d]);
      uncertain_[d + 1] = uncertain_[d] ||
                          (levels_[d].left_rule && follow != nullptr && follow->Has(byte));
      const bool alive = stepper_.Advance(levels_[d], byte, arena, &levels_[d + 1]);
      marks_[d + 1] = arena.size();
      valid = d + 1;
      if (!alive) {
        dead_at = d;
        break;
      }
    }
    if (length < valid) valid = length;
    previous = bytes;
    if (dead_at < 0) {
      report(p, p + 1, Outcome::kAccepted);
      ++p;
      continue;
    }
    const size_t end = SkipShared(candidates, p, dead_at + 1);
    report(p, end, uncertain_[dead_at + 1] ? Outcome::kUncertain : Outcome::kRejected);
    p = end;
  }
  arena.Truncate(arena_size);
}

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_TOKEN_WALK_H_
