#include "scheduler/constraints/compiled_grammar.h"

#include <utility>

namespace pagoda::constraints {
namespace {

// States with byte edges reachable from the root's start over byte edges,
// calls and returns, breadth-first.
std::vector<int32_t> ReachableByteStates(const Automaton& automaton) {
  std::vector<uint8_t> seen(automaton.num_states(), 0);
  std::vector<int32_t> order = {automaton.Start(automaton.root())};
  seen[order[0]] = 1;
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t s = order[i];
    auto visit = [&](int32_t t) {
      if (t >= 0 && !seen[t]) seen[t] = 1, order.push_back(t);
    };
    for (int32_t t : automaton.ByteSuccessors(s)) visit(t);
    for (const CallEdge& call : automaton.Calls(s)) {
      visit(automaton.Start(call.rule));
      visit(call.return_state);
    }
  }
  std::vector<int32_t> with_bytes;
  for (int32_t s : order) {
    if (automaton.HasByteEdges(s)) with_bytes.push_back(s);
  }
  return with_bytes;
}

}  // namespace

CompiledGrammar::CompiledGrammar(Automaton automaton,
                                 std::shared_ptr<const TokenVocabulary> vocabulary)
    : automaton_(std::move(automaton)),
      vocabulary_(std::move(vocabulary)),
      reachable_(ReachableByteStates(automaton_)),
      tokens_(new std::atomic<const StateTokens*>[automaton_.num_states()]) {
  for (int s = 0; s < automaton_.num_states(); ++s) tokens_[s].store(nullptr);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::Create(
    const GrammarBuilder& grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
    const AutomatonLimits& limits) {
  absl::StatusOr<Automaton> automaton = Automaton::Compile(grammar, limits);
  if (!automaton.ok()) return automaton.status();
  return std::shared_ptr<const CompiledGrammar>(
      new CompiledGrammar(*std::move(automaton), std::move(vocabulary)));
}

const StateTokens& CompiledGrammar::TokensOf(int32_t state) const {
  const StateTokens* tokens = tokens_[state].load(std::memory_order_acquire);
  if (tokens != nullptr) return *tokens;
  // Computed outside the lock: two threads may both compute a state; the
  // first to publish wins and the other's copy is dropped.
  auto computed = std::make_unique<StateTokens>(StateTokens::Compute(automaton_, *vocabulary_, state));
  absl::MutexLock lock(&mu_);
  tokens = tokens_[state].load(std::memory_order_acquire);
  if (tokens != nullptr) return *tokens;
  tokens = computed.get();
  owned_.push_back(std::move(computed));
  tokens_[state].store(tokens, std::memory_order_release);
  return *tokens;
}

int CompiledGrammar::Precompute(absl::Duration budget) const {
  const absl::Time deadline = absl::Now() + budget;
  int done = 0;
  for (int32_t state : reachable_) {
    if (absl::Now() >= deadline) break;
    TokensOf(state);
    ++done;
  }
  return done;
}

}  // namespace pagoda::constraints
