#include "scheduler/constraints/grammar_builder.h"

#include <utility>

namespace pagoda::constraints {

ExprId GrammarBuilder::Add(Kind kind) {
  nodes_.emplace_back();
  nodes_.back().kind = kind;
  return static_cast<ExprId>(nodes_.size() - 1);
}

ExprId GrammarBuilder::Empty() { return Add(Kind::kEmpty); }

ExprId GrammarBuilder::Nothing() { return Add(Kind::kNothing); }

ExprId GrammarBuilder::Bytes(const ByteSet& set) {
  if (set.Empty()) return Nothing();
  const ExprId id = Add(Kind::kBytes);
  nodes_[id].bytes = set;
  return id;
}

ExprId GrammarBuilder::Literal(std::string_view text) {
  if (text.empty()) return Empty();
  std::vector<ExprId> bytes;
  bytes.reserve(text.size());
  for (char c : text) bytes.push_back(Byte(static_cast<uint8_t>(c)));
  return Sequence(std::move(bytes));
}

ExprId GrammarBuilder::Sequence(std::vector<ExprId> parts) {
  if (parts.empty()) return Empty();
  if (parts.size() == 1) return parts[0];
  const ExprId id = Add(Kind::kSequence);
  nodes_[id].children = std::move(parts);
  return id;
}

ExprId GrammarBuilder::Choice(std::vector<ExprId> alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  if (alternatives.empty()) return Nothing();
  const ExprId id = Add(Kind::kChoice);
  nodes_[id].children = std::move(alternatives);
  return id;
}

ExprId GrammarBuilder::Repeat(ExprId child, int min, int max) {
  if (min == 1 && max == 1) return child;
  if (max == 0) return Empty();
  const ExprId id = Add(Kind::kRepeat);
  nodes_[id].children = {child};
  nodes_[id].min = min;
  nodes_[id].max = max;
  return id;
}

ExprId GrammarBuilder::Call(RuleId rule) {
  const ExprId id = Add(Kind::kCall);
  nodes_[id].rule = rule;
  return id;
}

RuleId GrammarBuilder::NewRule(std::string name) {
  rules_.push_back(Rule{std::move(name), -1});
  return static_cast<RuleId>(rules_.size() - 1);
}

void GrammarBuilder::SetBody(RuleId rule, ExprId body) { rules_[rule].body = body; }

}  // namespace pagoda::constraints
