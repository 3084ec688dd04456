#ifndef PAGODA_SCHEDULER_CONSTRAINTS_COMPILED_GRAMMAR_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_COMPILED_GRAMMAR_H_

// A grammar ready to constrain decoding against one vocabulary: its
// automaton, and per automaton state the tokens whose validity does not
// depend on the stack (StateTokens), computed once per state, on first use
// or ahead of time by Precompute, and shared by every request and sequence
// that uses the grammar.
//
// Thread-safe: TokensOf may be called from any thread.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/constraints/automaton.h"
#include "scheduler/constraints/grammar_builder.h"
#include "scheduler/constraints/token_vocabulary.h"
#include "scheduler/constraints/token_walk.h"

namespace pagoda::constraints {

class CompiledGrammar {
 public:
  // Compiles `grammar` (see Automaton::Compile for the errors).
  // `vocabulary` must not be null.
  static absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Create(
      const GrammarBuilder& grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
      const AutomatonLimits& limits = {});
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const Automaton& automaton() const { return automaton_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  // The stack-independent tokens of `state`. REQUIRES: the state has byte edges.
  const StateTokens& TokensOf(int32_t state) const;
  // Computes the tokens of the states the root can reach, nearest first,
  // until all are done or `budget` has passed; returns how many states are
  // done.
  int Precompute(absl::Duration budget) const;
  // States with byte edges that the root can reach.
  int num_reachable_states() const { return static_cast<int>(reachable_.size()); }

 private:
  CompiledGrammar(Automaton automaton, std::shared_ptr<const TokenVocabulary> vocabulary);

  const Automaton automaton_;
  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::vector<int32_t> reachable_;  // Breadth-first from the root's start.
  std::unique_ptr<std::atomic<const StateTokens*>[]> tokens_;
  mutable absl::Mutex mu_;
  mutable std::vector<std::unique_ptr<StateTokens>> owned_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_COMPILED_GRAMMAR_H_
