#ifndef PAGODA_SCHEDULER_CONSTRAINTS_AUTOMATON_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_AUTOMATON_H_

// A GrammarBuilder grammar compiled to a recursive transition network: each
// rule's body becomes a deterministic automaton whose edges read a byte (by
// byte class: bytes the grammar never tells apart share one) or call a rule
// and continue at a return state once the callee is complete. The parser
// (stack_set.h) runs it with a stack of return states.
//
// Compile() makes every state able to reach the end of its rule (states and
// rules that match nothing are cut away), so any byte string the parser
// accepts can be completed: a prefix is valid exactly when the parser still
// has a state. It refuses left recursion (a rule that can call itself before
// reading a byte), which a stack parser cannot run.
//
// Immutable after Compile; thread-safe. (Hand-written: no Debian package
// exposes a regex or grammar automaton stepped byte by byte with prefix
// viability; see CMakeLists.txt.)

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/constraints/byte_set.h"
#include "scheduler/constraints/grammar_builder.h"

namespace pagoda::constraints {

// Bounds on what one grammar may compile to; past them Compile() answers
// INVALID_ARGUMENT ("too complex"), so a request cannot make the server
// build an automaton of unbounded size, or spend unbounded time on one.
struct AutomatonLimits {
  int max_nfa_states = 1 << 20;
  int max_dfa_states = 1 << 16;
  // Steps of the subset construction (NFA states visited by closures and
  // byte edges followed, summed over every DFA state): a small regex can
  // need many large NFA state sets long before it reaches max_dfa_states.
  int64_t max_compile_steps = int64_t{1} << 24;
};

// A call edge: enter `rule`, then continue at `return_state`.
struct CallEdge {
  RuleId rule;
  int32_t return_state;
};

class Automaton {
 public:
  static absl::StatusOr<Automaton> Compile(const GrammarBuilder& grammar,
                                           const AutomatonLimits& limits = {});

  int num_states() const { return static_cast<int>(final_.size()); }
  int num_rules() const { return static_cast<int>(start_.size()); }
  RuleId root() const { return root_; }
  // The state reading `byte` leads to from `state`, or -1.
  int32_t Next(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]];
  }
  // Where each byte class leads from `state` (-1 for none): every state a
  // byte reaches, without visiting 256 bytes that share a few classes.
  absl::Span<const int32_t> ByteSuccessors(int32_t state) const {
    return absl::MakeConstSpan(next_.data() + static_cast<size_t>(state) * num_classes_,
                               static_cast<size_t>(num_classes_));
  }
  bool HasByteEdges(int32_t state) const { return has_byte_edges_[state]; }
  absl::Span<const CallEdge> Calls(int32_t state) const {
    return absl::MakeConstSpan(calls_.data() + call_offsets_[state],
                               calls_.data() + call_offsets_[state + 1]);
  }
  // Whether the state's rule may end here.
  bool IsFinal(int32_t state) const { return final_[state]; }
  RuleId RuleOf(int32_t state) const { return rule_of_[state]; }
  int32_t Start(RuleId rule) const { return start_[rule]; }
  const std::string& RuleName(RuleId rule) const { return rule_names_[rule]; }
  // Bytes that can come right after a complete `rule` somewhere in the
  // grammar (the rule's FOLLOW set).
  const ByteSet& Follow(RuleId rule) const { return follow_[rule]; }

 private:
  friend class AutomatonBuilder;
  Automaton() = default;

  int num_classes_ = 0;
  uint8_t class_of_[256] = {};
  std::vector<int32_t> next_;  // [state][class]
  std::vector<uint8_t> has_byte_edges_;
  std::vector<uint8_t> final_;
  std::vector<RuleId> rule_of_;
  std::vector<int32_t> call_offsets_;  // [num_states + 1]
  std::vector<CallEdge> calls_;
  std::vector<int32_t> start_;  // Per rule.
  std::vector<std::string> rule_names_;
  std::vector<ByteSet> follow_;
  RuleId root_ = 0;
};

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_AUTOMATON_H_
