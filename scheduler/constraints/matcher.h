#ifndef PAGODA_SCHEDULER_CONSTRAINTS_MATCHER_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_MATCHER_H_

// One sequence's place in a grammar: advanced token by token as the
// sequence grows, and asked each step for the packed mask of the tokens
// that may come next. Copyable (a forked sequence copies its parent's).
//
// Not thread-safe; the grammar it points to is shared and thread-safe.

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "scheduler/constraints/compiled_grammar.h"
#include "scheduler/constraints/stack_set.h"

namespace pagoda::constraints {

class Matcher {
 public:
  // REQUIRES: grammar is not null.
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  Matcher(const Matcher& other);
  Matcher& operator=(const Matcher& other);

  // Reads token `token_id`'s bytes. False, and nothing changes, if the
  // grammar does not allow them here or the token has no bytes.
  bool AcceptToken(int32_t token_id);
  // Reads `bytes`. False, and nothing changes, if the grammar refuses them.
  bool AcceptBytes(std::string_view bytes);
  // Whether the last refusal came from the parses' bound (kMaxOpenStacks),
  // not from the grammar: masks are computed stack by stack, so past the
  // bound a token the mask allowed can be refused (the engine then lets
  // only the end follow).
  bool refused_as_ambiguous() const { return refused_as_ambiguous_; }

  // Whether the text so far is a complete sentence of the grammar (the end
  // of sequence may come now).
  bool CanEnd() const { return stacks_.complete; }
  // Whether more bytes may come.
  bool CanContinue() const { return !stacks_.tops.empty(); }

  // Sets `mask` (vocabulary().mask_words() words, bit id % 32 of word
  // id / 32) to the tokens whose bytes keep the text a valid prefix of the
  // grammar. End-of-sequence tokens are not the vocabulary's: the caller
  // adds them when CanEnd().
  void FillNextTokenMask(absl::Span<uint32_t> mask);

  const CompiledGrammar& grammar() const { return *grammar_; }
  // The parser state, for tests and diagnostics.
  const StackSet& stacks() const { return stacks_; }
  const FrameArena& arena() const { return arena_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  FrameArena arena_;
  StackSet stacks_;
  // Scratch, rebuilt on copy.
  std::unique_ptr<StackStepper> stepper_;
  std::unique_ptr<TokenWalker> walker_;
  StackSet next_;
  std::vector<uint32_t> scratch_;
  bool refused_as_ambiguous_ = false;
};

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_MATCHER_H_
