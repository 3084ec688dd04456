#ifndef PAGODA_SCHEDULER_CONSTRAINTS_GRAMMAR_BUILDER_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_GRAMMAR_BUILDER_H_

// A context-free grammar over bytes, written as expressions: what the JSON
// Schema, regex, choice and GBNF front ends produce, and what the automaton
// (automaton.h) compiles. Each rule has one body expression; an expression
// may call any rule, so rules give recursion, and expressions that are used
// twice are simply referenced twice (the automaton copies them).
//
// Not thread-safe while being built; immutable (and shareable) after.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/constraints/byte_set.h"

namespace pagoda::constraints {

using ExprId = int32_t;
using RuleId = int32_t;

inline constexpr int kUnbounded = -1;  // Repeat's max: no upper bound.

class GrammarBuilder {
 public:
  enum class Kind : uint8_t { kEmpty, kNothing, kBytes, kSequence, kChoice, kRepeat, kCall };
  struct Node {
    Kind kind = Kind::kEmpty;
    ByteSet bytes;                // kBytes: one byte from the set.
    std::vector<ExprId> children;  // kSequence, kChoice; kRepeat: one child.
    int min = 0;                  // kRepeat.
    int max = 0;                  // kRepeat: kUnbounded or >= min.
    RuleId rule = -1;             // kCall.
  };
  struct Rule {
    std::string name;
    ExprId body = -1;  // -1 until SetBody.
  };

  // The empty string.
  ExprId Empty();
  // No string at all (an empty alternation).
  ExprId Nothing();
  // One byte of `set`.
  ExprId Bytes(const ByteSet& set);
  ExprId Byte(uint8_t b) { return Bytes(ByteSet::Of(b)); }
  // Exactly `text`'s bytes.
  ExprId Literal(std::string_view text);
  ExprId Sequence(std::vector<ExprId> parts);
  ExprId Choice(std::vector<ExprId> alternatives);
  // `min` to `max` (or kUnbounded) copies of `child`. REQUIRES: 0 <= min,
  // max == kUnbounded or max >= min.
  ExprId Repeat(ExprId child, int min, int max);
  ExprId Optional(ExprId child) { return Repeat(child, 0, 1); }
  ExprId Star(ExprId child) { return Repeat(child, 0, kUnbounded); }
  ExprId Plus(ExprId child) { return Repeat(child, 1, kUnbounded); }
  ExprId Call(RuleId rule);

  // A new rule named `name` with no body yet.
  RuleId NewRule(std::string name);
  void SetBody(RuleId rule, ExprId body);
  // The rule the language starts from (0 unless set).
  void SetRoot(RuleId rule) { root_ = rule; }

  const Node& node(ExprId id) const { return nodes_[id]; }
  const Rule& rule(RuleId id) const { return rules_[id]; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_rules() const { return static_cast<int>(rules_.size()); }
  RuleId root() const { return root_; }

 private:
  ExprId Add(Kind kind);
  std::vector<Node> nodes_;
  std::vector<Rule> rules_;
  RuleId root_ = 0;
};

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_GRAMMAR_BUILDER_H_
