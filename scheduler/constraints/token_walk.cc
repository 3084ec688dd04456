#include "scheduler/constraints/token_walk.h"

#include <algorithm>
#include <numeric>

namespace pagoda::constraints {
namespace {

// 0, 1, ..., n - 1: the candidates of a precompute (every token).
absl::Span<const int32_t> AllTokens(int n) {
  thread_local std::vector<int32_t> all;
  if (static_cast<int>(all.size()) < n) {
    all.resize(n);
    std::iota(all.begin(), all.end(), 0);
  }
  return absl::MakeConstSpan(all.data(), n);
}

void SetBit(uint32_t* mask, int32_t id) { mask[id / 32] |= uint32_t{1} << (id % 32); }

}  // namespace

size_t TokenWalker::SkipShared(absl::Span<const int32_t> candidates, size_t p, int length) const {
  const int end = vocabulary_.PrefixEnd(candidates[p], length);
  return std::lower_bound(candidates.begin() + p + 1, candidates.end(), end) - candidates.begin();
}

StateTokens StateTokens::Compute(const Automaton& automaton, const TokenVocabulary& vocabulary,
                                 int32_t state) {
  StackStepper stepper(automaton);
  FrameArena arena;
  TokenWalker walker(stepper, vocabulary);
  StackSet start;
  stepper.Close(state, kOutsideFrame, arena, &start);
  const ByteSet& follow = automaton.Follow(automaton.RuleOf(state));
  std::vector<int32_t> accepted;
  StateTokens out;
  const absl::Span<const int32_t> all = AllTokens(vocabulary.size());
  walker.Walk(start, &follow, arena, all, [&](size_t begin, size_t end, TokenWalker::Outcome outcome) {
    if (outcome == TokenWalker::Outcome::kRejected) return;
    std::vector<int32_t>& into =
        outcome == TokenWalker::Outcome::kAccepted ? accepted : out.uncertain;
    for (size_t k = begin; k < end; ++k) into.push_back(static_cast<int32_t>(k));
  });
  const size_t ids_size = accepted.size();
  const size_t all_but_size = vocabulary.size() - accepted.size();
  const size_t bits_size = vocabulary.mask_words();
  if (bits_size < ids_size && bits_size < all_but_size) {
    out.form = Form::kBits;
    out.bits.assign(bits_size, 0);
    for (int32_t k : accepted) SetBit(out.bits.data(), vocabulary.token_id(k));
  } else if (all_but_size < ids_size) {
    out.form = Form::kAllBut;
    std::vector<uint8_t> is_accepted(vocabulary.size(), 0);
    for (int32_t k : accepted) is_accepted[k] = 1;
    for (int k = 0; k < vocabulary.size(); ++k) {
      if (!is_accepted[k]) out.ids.push_back(vocabulary.token_id(k));
    }
  } else {
    out.form = Form::kIds;
    for (int32_t k : accepted) out.ids.push_back(vocabulary.token_id(k));
  }
  std::sort(out.ids.begin(), out.ids.end());
  return out;
}

void StateTokens::AddAccepted(const TokenVocabulary& vocabulary, uint32_t* mask,
                              uint32_t* scratch) const {
  const int words = vocabulary.mask_words();
  switch (form) {
    case Form::kIds:
      for (int32_t id : ids) SetBit(mask, id);
      return;
    case Form::kBits:
      for (int w = 0; w < words; ++w) mask[w] |= bits[w];
      return;
    case Form::kAllBut: {
      const uint32_t* all = vocabulary.byte_tokens().data();
      std::copy(all, all + words, scratch);
      for (int32_t id : ids) scratch[id / 32] &= ~(uint32_t{1} << (id % 32));
      for (int w = 0; w < words; ++w) mask[w] |= scratch[w];
      return;
    }
  }
}

void AddAcceptedCandidates(TokenWalker& walker, FrameArena& arena, const StackSet& start,
                           const TokenVocabulary& vocabulary,
                           absl::Span<const int32_t> candidates, uint32_t* mask) {
  walker.Walk(start, nullptr, arena, candidates,
              [&](size_t begin, size_t end, TokenWalker::Outcome outcome) {
                if (outcome != TokenWalker::Outcome::kAccepted) return;
                for (size_t p = begin; p < end; ++p) {
                  SetBit(mask, vocabulary.token_id(candidates[p]));
                }
              });
}

}  // namespace pagoda::constraints
