#include "scheduler/constraints/automaton.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace pagoda::constraints {

using Kind = GrammarBuilder::Kind;

// Builds an Automaton: byte classes, then per rule a Thompson NFA and its
// subset construction, then the whole network trimmed and analysed.
class AutomatonBuilder {
 public:
  AutomatonBuilder(const GrammarBuilder& grammar, const AutomatonLimits& limits)
      : grammar_(grammar), limits_(limits) {}

  absl::StatusOr<Automaton> Build();

 private:
  struct NfaState {
    std::vector<int32_t> epsilon;
    std::vector<std::pair<const ByteSet*, int32_t>> bytes;
    std::vector<std::pair<RuleId, int32_t>> calls;
  };

  void ComputeClasses();
  absl::StatusOr<int32_t> NewNfaState();
  // Counts `steps` of subset construction against max_compile_steps.
  absl::Status Spend(int64_t steps);
  absl::Status BuildNfa(ExprId expr, int32_t from, int32_t to, int depth);
  absl::Status BuildRepeat(const GrammarBuilder::Node& node, int32_t from, int32_t to, int depth);
  void Closure(std::vector<int32_t>& set);
  // The byte classes `bytes` covers (a grammar node's set, so the pointer
  // is stable for the whole build).
  const std::vector<int>& ClassesOf(const ByteSet* bytes);
  absl::StatusOr<int32_t> DfaStateOf(std::vector<int32_t> set, RuleId rule);
  absl::Status Determinize(RuleId rule);
  absl::Status ExpandDfaState(int32_t state);
  // Marks states by an and-or fixpoint: a state is marked when `base` says
  // so, when (with `through_bytes`) a byte edge leads to a marked state, or
  // when a call's callee start and return state are both marked.
  std::vector<uint8_t> Fixpoint(const std::vector<uint8_t>& base, bool through_bytes) const;
  absl::Status Trim();
  absl::Status CheckLeftRecursion(const std::vector<uint8_t>& nullable) const;
  void ComputeFollow(const std::vector<uint8_t>& nullable);
  void Flatten();

  const GrammarBuilder& grammar_;
  const AutomatonLimits limits_;
  Automaton out_;
  std::vector<int> class_representative_;
  std::vector<ByteSet> class_bytes_;
  // The rule being compiled: its NFA and the map from NFA state sets to DFA states.
  std::vector<NfaState> nfa_;
  int32_t nfa_accept_ = 0;
  int total_nfa_states_ = 0;
  int64_t compile_steps_ = 0;
  absl::flat_hash_map<std::vector<int32_t>, int32_t> dfa_of_set_;
  std::vector<std::vector<int32_t>> set_of_dfa_;  // Of the rule's states, from rule_first_state_.
  int32_t rule_first_state_ = 0;
  std::vector<uint8_t> closure_mark_;
  absl::flat_hash_map<const ByteSet*, std::vector<int>> classes_of_set_;
  // Per DFA state, before Flatten: its calls.
  std::vector<std::vector<CallEdge>> calls_;
};

void AutomatonBuilder::ComputeClasses() {
  // Partition refinement: bytes stay in one class while every set of the
  // grammar contains both or neither. Each distinct set splits the classes
  // it cuts, as bit sets (a schema's grammar repeats the same few sets
  // thousands of times, so most nodes are skipped).
  std::vector<ByteSet> classes = {ByteSet::All()};
  absl::flat_hash_set<ByteSet> seen;
  for (int id = 0; id < grammar_.num_nodes(); ++id) {
    const GrammarBuilder::Node& node = grammar_.node(id);
    if (node.kind != Kind::kBytes || !seen.insert(node.bytes).second) continue;
    const size_t before = classes.size();
    for (size_t c = 0; c < before; ++c) {
      const ByteSet inside = classes[c] & node.bytes;
      if (inside.Empty() || inside == classes[c]) continue;
      classes.push_back(classes[c] & ~node.bytes);
      classes[c] = inside;
    }
  }
  // Numbered by their smallest byte, so the automaton does not depend on
  // the order the sets came in.
  std::sort(classes.begin(), classes.end(), [](const ByteSet& a, const ByteSet& b) {
    return a.Lowest() < b.Lowest();
  });
  out_.num_classes_ = static_cast<int>(classes.size());
  class_representative_.clear();
  class_bytes_ = classes;
  for (int c = 0; c < out_.num_classes_; ++c) {
    class_representative_.push_back(classes[c].Lowest());
    classes[c].ForEach([&](uint8_t b) { out_.class_of_[b] = static_cast<uint8_t>(c); });
  }
}

absl::StatusOr<int32_t> AutomatonBuilder::NewNfaState() {
  if (++total_nfa_states_ > limits_.max_nfa_states) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar is too complex: over ", limits_.max_nfa_states, " automaton states"));
  }
  nfa_.emplace_back();
  return static_cast<int32_t>(nfa_.size() - 1);
}

absl::Status AutomatonBuilder::Spend(int64_t steps) {
  compile_steps_ += steps;
  if (compile_steps_ <= limits_.max_compile_steps) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "grammar is too complex: over ", limits_.max_compile_steps, " compile steps"));
}

absl::Status AutomatonBuilder::BuildRepeat(const GrammarBuilder::Node& node, int32_t from,
                                           int32_t to, int depth) {
  const ExprId child = node.children[0];
  int32_t current = from;
  for (int i = 0; i < node.min; ++i) {
    absl::StatusOr<int32_t> next = NewNfaState();
    if (!next.ok()) return next.status();
    if (absl::Status s = BuildNfa(child, current, *next, depth + 1); !s.ok()) return s;
    current = *next;
  }
  if (node.max == kUnbounded) {
    absl::StatusOr<int32_t> loop = NewNfaState();
    if (!loop.ok()) return loop.status();
    nfa_[current].epsilon.push_back(*loop);
    if (absl::Status s = BuildNfa(child, *loop, *loop, depth + 1); !s.ok()) return s;
    nfa_[*loop].epsilon.push_back(to);
    return absl::OkStatus();
  }
  for (int i = node.min; i < node.max; ++i) {
    absl::StatusOr<int32_t> next = NewNfaState();
    if (!next.ok()) return next.status();
    nfa_[current].epsilon.push_back(to);
    if (absl::Status s = BuildNfa(child, current, *next, depth + 1); !s.ok()) return s;
    current = *next;
  }
  nfa_[current].epsilon.push_back(to);
  return absl::OkStatus();
}

absl::Status AutomatonBuilder::BuildNfa(ExprId expr, int32_t from, int32_t to, int depth) {
  // Expressions nest as deep as their front end allowed; this bound keeps
  // the C++ stack safe whatever a front end let through.
  if (depth > 512) return absl::InvalidArgumentError("grammar is too deeply nested");
  const GrammarBuilder::Node& node = grammar_.node(expr);
  switch (node.kind) {
    case Kind::kEmpty:
      nfa_[from].epsilon.push_back(to);
      return absl::OkStatus();
    case Kind::kNothing:
      return absl::OkStatus();
    case Kind::kBytes:
      nfa_[from].bytes.emplace_back(&node.bytes, to);
      return absl::OkStatus();
    case Kind::kCall:
      nfa_[from].calls.emplace_back(node.rule, to);
      return absl::OkStatus();
    case Kind::kChoice:
      for (ExprId child : node.children) {
        if (absl::Status s = BuildNfa(child, from, to, depth + 1); !s.ok()) return s;
      }
      return absl::OkStatus();
    case Kind::kSequence: {
      int32_t current = from;
      for (size_t i = 0; i < node.children.size(); ++i) {
        int32_t next = to;
        if (i + 1 < node.children.size()) {
          absl::StatusOr<int32_t> created = NewNfaState();
          if (!created.ok()) return created.status();
          next = *created;
        }
        if (absl::Status s = BuildNfa(node.children[i], current, next, depth + 1); !s.ok()) {
          return s;
        }
        current = next;
      }
      return absl::OkStatus();
    }
    case Kind::kRepeat:
      return BuildRepeat(node, from, to, depth);
  }
  return absl::InternalError("unknown expression kind");
}

void AutomatonBuilder::Closure(std::vector<int32_t>& set) {
  // Marks are cleared again at the end, so a closure costs its own size,
  // not the rule's whole NFA.
  if (closure_mark_.size() < nfa_.size()) closure_mark_.resize(nfa_.size(), 0);
  std::vector<int32_t> stack = set;
  set.clear();
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (closure_mark_[s]) continue;
    closure_mark_[s] = 1;
    set.push_back(s);
    for (int32_t t : nfa_[s].epsilon) stack.push_back(t);
  }
  for (int32_t s : set) closure_mark_[s] = 0;
  std::sort(set.begin(), set.end());
}

const std::vector<int>& AutomatonBuilder::ClassesOf(const ByteSet* bytes) {
  auto [it, inserted] = classes_of_set_.try_emplace(bytes);
  if (inserted) {
    for (int c = 0; c < out_.num_classes_; ++c) {
      if (bytes->Has(static_cast<uint8_t>(class_representative_[c]))) it->second.push_back(c);
    }
  }
  return it->second;
}

absl::StatusOr<int32_t> AutomatonBuilder::DfaStateOf(std::vector<int32_t> set, RuleId rule) {
  auto it = dfa_of_set_.find(set);
  if (it != dfa_of_set_.end()) return it->second;
  if (out_.num_states() >= limits_.max_dfa_states) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grammar is too complex: over ", limits_.max_dfa_states, " automaton states"));
  }
  const int32_t id = out_.num_states();
  out_.final_.push_back(std::binary_search(set.begin(), set.end(), nfa_accept_));
  out_.rule_of_.push_back(rule);
  out_.has_byte_edges_.push_back(0);
  out_.next_.resize(out_.next_.size() + out_.num_classes_, -1);
  calls_.emplace_back();
  dfa_of_set_.emplace(set, id);
  set_of_dfa_.push_back(std::move(set));
  return id;
}

absl::Status AutomatonBuilder::ExpandDfaState(int32_t state) {
  // A copy: expanding adds sets to set_of_dfa_.
  const std::vector<int32_t> set = set_of_dfa_[state - rule_first_state_];
  const RuleId rule = out_.rule_of_[state];
  std::vector<std::vector<int32_t>> targets(out_.num_classes_);
  int64_t steps = static_cast<int64_t>(set.size());
  for (int32_t s : set) {
    for (const auto& [bytes, to] : nfa_[s].bytes) {
      const std::vector<int>& classes = ClassesOf(bytes);
      steps += static_cast<int64_t>(classes.size());
      for (int c : classes) targets[c].push_back(to);
    }
  }
  if (absl::Status s = Spend(steps); !s.ok()) return s;
  for (int c = 0; c < out_.num_classes_; ++c) {
    if (targets[c].empty()) continue;
    Closure(targets[c]);
    if (absl::Status s = Spend(static_cast<int64_t>(targets[c].size())); !s.ok()) return s;
    absl::StatusOr<int32_t> next = DfaStateOf(std::move(targets[c]), rule);
    if (!next.ok()) return next.status();
    out_.next_[static_cast<size_t>(state) * out_.num_classes_ + c] = *next;
  }
  std::vector<RuleId> callees;
  for (int32_t s : set) {
    for (const auto& [callee, to] : nfa_[s].calls) callees.push_back(callee);
  }
  std::sort(callees.begin(), callees.end());
  callees.erase(std::unique(callees.begin(), callees.end()), callees.end());
  for (RuleId callee : callees) {
    std::vector<int32_t> target;
    for (int32_t s : set) {
      for (const auto& [r, to] : nfa_[s].calls) {
        if (r == callee) target.push_back(to);
      }
    }
    Closure(target);
    if (absl::Status s = Spend(static_cast<int64_t>(target.size())); !s.ok()) return s;
    absl::StatusOr<int32_t> next = DfaStateOf(std::move(target), rule);
    if (!next.ok()) return next.status();
    calls_[state].push_back(CallEdge{callee, *next});
  }
  return absl::OkStatus();
}

absl::Status AutomatonBuilder::Determinize(RuleId rule) {
  nfa_.clear();
  absl::StatusOr<int32_t> start = NewNfaState();
  if (!start.ok()) return start.status();
  absl::StatusOr<int32_t> accept = NewNfaState();
  if (!accept.ok()) return accept.status();
  nfa_accept_ = *accept;
  const ExprId body = grammar_.rule(rule).body;
  if (body < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rule '", grammar_.rule(rule).name, "' is never defined"));
  }
  if (absl::Status s = BuildNfa(body, *start, *accept, 0); !s.ok()) return s;
  dfa_of_set_.clear();
  set_of_dfa_.clear();
  const int32_t first = out_.num_states();
  rule_first_state_ = first;
  std::vector<int32_t> start_set = {*start};
  Closure(start_set);
  absl::StatusOr<int32_t> dfa_start = DfaStateOf(std::move(start_set), rule);
  if (!dfa_start.ok()) return dfa_start.status();
  out_.start_[rule] = *dfa_start;
  for (int32_t state = first; state < out_.num_states(); ++state) {
    if (absl::Status s = ExpandDfaState(state); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<uint8_t> AutomatonBuilder::Fixpoint(const std::vector<uint8_t>& base,
                                                bool through_bytes) const {
  const int n = out_.num_states();
  std::vector<std::vector<int32_t>> byte_preds(through_bytes ? n : 0);
  std::vector<std::vector<int32_t>> call_waiters(n);  // State -> states with a call it may complete.
  for (int32_t s = 0; s < n; ++s) {
    if (through_bytes) {
      for (int c = 0; c < out_.num_classes_; ++c) {
        const int32_t t = out_.next_[static_cast<size_t>(s) * out_.num_classes_ + c];
        if (t >= 0) byte_preds[t].push_back(s);
      }
    }
    for (const CallEdge& call : calls_[s]) {
      call_waiters[out_.start_[call.rule]].push_back(s);
      call_waiters[call.return_state].push_back(s);
    }
  }
  std::vector<uint8_t> marked(n, 0);
  std::vector<int32_t> queue;
  for (int32_t s = 0; s < n; ++s) {
    if (base[s]) {
      marked[s] = 1;
      queue.push_back(s);
    }
  }
  auto call_completes = [&](int32_t s) {
    for (const CallEdge& call : calls_[s]) {
      if (marked[out_.start_[call.rule]] && marked[call.return_state]) return true;
    }
    return false;
  };
  while (!queue.empty()) {
    const int32_t x = queue.back();
    queue.pop_back();
    if (through_bytes) {
      for (int32_t s : byte_preds[x]) {
        if (!marked[s]) marked[s] = 1, queue.push_back(s);
      }
    }
    for (int32_t s : call_waiters[x]) {
      if (!marked[s] && call_completes(s)) marked[s] = 1, queue.push_back(s);
    }
  }
  return marked;
}

absl::Status AutomatonBuilder::Trim() {
  std::vector<uint8_t> productive =
      Fixpoint(std::vector<uint8_t>(out_.final_.begin(), out_.final_.end()), true);
  if (!productive[out_.start_[out_.root_]]) {
    return absl::InvalidArgumentError("the grammar matches no string");
  }
  for (int32_t s = 0; s < out_.num_states(); ++s) {
    bool has_bytes = false;
    for (int c = 0; c < out_.num_classes_; ++c) {
      int32_t& t = out_.next_[static_cast<size_t>(s) * out_.num_classes_ + c];
      if (t >= 0 && !productive[t]) t = -1;
      has_bytes = has_bytes || t >= 0;
    }
    out_.has_byte_edges_[s] = has_bytes;
    std::vector<CallEdge>& calls = calls_[s];
    calls.erase(std::remove_if(calls.begin(), calls.end(),
                               [&](const CallEdge& call) {
                                 return !productive[out_.start_[call.rule]] ||
                                        !productive[call.return_state];
                               }),
                calls.end());
  }
  return absl::OkStatus();
}

absl::Status AutomatonBuilder::CheckLeftRecursion(const std::vector<uint8_t>& nullable) const {
  // Rule -> rules it can call before reading a byte.
  const int num_rules = out_.num_rules();
  std::vector<std::vector<RuleId>> left_calls(num_rules);
  for (RuleId r = 0; r < num_rules; ++r) {
    std::vector<int32_t> stack = {out_.start_[r]};
    std::vector<uint8_t> seen(out_.num_states(), 0);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (seen[s]) continue;
      seen[s] = 1;
      for (const CallEdge& call : calls_[s]) {
        left_calls[r].push_back(call.rule);
        if (nullable[out_.start_[call.rule]]) stack.push_back(call.return_state);
      }
    }
  }
  // A cycle in that graph is left recursion (iterative DFS, three colours).
  std::vector<uint8_t> colour(num_rules, 0);
  for (RuleId r = 0; r < num_rules; ++r) {
    if (colour[r] != 0) continue;
    std::vector<std::pair<RuleId, size_t>> stack = {{r, 0}};
    colour[r] = 1;
    while (!stack.empty()) {
      auto& [rule, next] = stack.back();
      if (next == left_calls[rule].size()) {
        colour[rule] = 2;
        stack.pop_back();
        continue;
      }
      const RuleId callee = left_calls[rule][next++];
      if (colour[callee] == 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rule '", out_.rule_names_[callee], "' is left-recursive (it can reach itself "
            "before reading a byte)"));
      }
      if (colour[callee] == 0) {
        colour[callee] = 1;
        stack.emplace_back(callee, 0);
      }
    }
  }
  return absl::OkStatus();
}

void AutomatonBuilder::ComputeFollow(const std::vector<uint8_t>& nullable) {
  const int n = out_.num_states();
  std::vector<ByteSet> first(n);
  for (int32_t s = 0; s < n; ++s) {
    for (int c = 0; c < out_.num_classes_; ++c) {
      if (out_.next_[static_cast<size_t>(s) * out_.num_classes_ + c] >= 0) {
        first[s] |= class_bytes_[c];
      }
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t s = 0; s < n; ++s) {
      ByteSet updated = first[s];
      for (const CallEdge& call : calls_[s]) {
        updated |= first[out_.start_[call.rule]];
        if (nullable[out_.start_[call.rule]]) updated |= first[call.return_state];
      }
      if (!(updated == first[s])) first[s] = updated, changed = true;
    }
  }
  out_.follow_.assign(out_.num_rules(), ByteSet());
  for (bool changed = true; changed;) {
    changed = false;
    for (int32_t s = 0; s < n; ++s) {
      for (const CallEdge& call : calls_[s]) {
        ByteSet updated = out_.follow_[call.rule];
        updated |= first[call.return_state];
        if (nullable[call.return_state]) updated |= out_.follow_[out_.rule_of_[s]];
        if (!(updated == out_.follow_[call.rule])) out_.follow_[call.rule] = updated, changed = true;
      }
    }
  }
}

void AutomatonBuilder::Flatten() {
  out_.call_offsets_.assign(1, 0);
  for (const std::vector<CallEdge>& calls : calls_) {
    out_.calls_.insert(out_.calls_.end(), calls.begin(), calls.end());
    out_.call_offsets_.push_back(static_cast<int32_t>(out_.calls_.size()));
  }
}

absl::StatusOr<Automaton> AutomatonBuilder::Build() {
  if (grammar_.num_rules() == 0) return absl::InvalidArgumentError("the grammar has no rule");
  ComputeClasses();
  out_.root_ = grammar_.root();
  out_.start_.assign(grammar_.num_rules(), -1);
  for (RuleId r = 0; r < grammar_.num_rules(); ++r) {
    out_.rule_names_.push_back(grammar_.rule(r).name);
  }
  for (RuleId r = 0; r < grammar_.num_rules(); ++r) {
    if (absl::Status s = Determinize(r); !s.ok()) return s;
  }
  nfa_.clear();
  nfa_.shrink_to_fit();
  if (absl::Status s = Trim(); !s.ok()) return s;
  const std::vector<uint8_t> nullable =
      Fixpoint(std::vector<uint8_t>(out_.final_.begin(), out_.final_.end()), false);
  if (absl::Status s = CheckLeftRecursion(nullable); !s.ok()) return s;
  ComputeFollow(nullable);
  Flatten();
  return std::move(out_);
}

absl::StatusOr<Automaton> Automaton::Compile(const GrammarBuilder& grammar,
                                             const AutomatonLimits& limits) {
  return AutomatonBuilder(grammar, limits).Build();
}

}  // namespace pagoda::constraints
