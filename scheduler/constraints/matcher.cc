#include "scheduler/constraints/matcher.h"

#include <algorithm>
#include <utility>

namespace pagoda::constraints {
namespace {

// Frames accumulate as the text grows (each call pushes one, and old ones
// stay until compacted); past this many, and several times what the stacks
// use, the arena is compacted.
constexpr int32_t kCompactAbove = 4096;

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)),
      stepper_(std::make_unique<StackStepper>(grammar_->automaton())),
      walker_(std::make_unique<TokenWalker>(*stepper_, grammar_->vocabulary())) {
  const Automaton& automaton = grammar_->automaton();
  stepper_->Close(automaton.Start(automaton.root()), kRootFrame, arena_, &stacks_);
}

Matcher::Matcher(const Matcher& other)
    : grammar_(other.grammar_),
      arena_(other.arena_),
      stacks_(other.stacks_),
      stepper_(std::make_unique<StackStepper>(grammar_->automaton())),
      walker_(std::make_unique<TokenWalker>(*stepper_, grammar_->vocabulary())) {}

Matcher& Matcher::operator=(const Matcher& other) {
  if (this == &other) return *this;
  grammar_ = other.grammar_;
  arena_ = other.arena_;
  stacks_ = other.stacks_;
  stepper_ = std::make_unique<StackStepper>(grammar_->automaton());
  walker_ = std::make_unique<TokenWalker>(*stepper_, grammar_->vocabulary());
  return *this;
}

bool Matcher::AcceptToken(int32_t token_id) {
  if (token_id < 0 || token_id >= grammar_->vocabulary().mask_size()) return false;
  const std::string_view bytes = grammar_->vocabulary().BytesOfId(token_id);
  if (bytes.empty()) return false;
  return AcceptBytes(bytes);
}

bool Matcher::AcceptBytes(std::string_view bytes) {
  const int32_t arena_size = arena_.size();
  StackSet current = stacks_;
  for (char c : bytes) {
    if (!stepper_->Advance(current, static_cast<uint8_t>(c), arena_, &next_)) {
      arena_.Truncate(arena_size);
      refused_as_ambiguous_ = stepper_->too_many();
      return false;
    }
    std::swap(current, next_);
  }
  stacks_ = std::move(current);
  if (arena_.size() > kCompactAbove &&
      arena_.size() > 8 * static_cast<int32_t>(stacks_.tops.size() + 1)) {
    arena_.Compact(&stacks_);
  }
  return true;
}

void Matcher::FillNextTokenMask(absl::Span<uint32_t> mask) {
  const TokenVocabulary& vocabulary = grammar_->vocabulary();
  std::fill(mask.begin(), mask.end(), 0);
  scratch_.resize(vocabulary.mask_words());
  std::vector<int32_t> seen_states;
  for (const StackTop& top : stacks_.tops) {
    const StateTokens& tokens = grammar_->TokensOf(top.state);
    if (std::find(seen_states.begin(), seen_states.end(), top.state) == seen_states.end()) {
      seen_states.push_back(top.state);
      tokens.AddAccepted(vocabulary, mask.data(), scratch_.data());
    }
    if (tokens.uncertain.empty()) continue;
    StackSet single;
    single.tops.push_back(top);
    AddAcceptedCandidates(*walker_, arena_, single, vocabulary, tokens.uncertain, mask.data());
  }
}

}  // namespace pagoda::constraints
