#ifndef PAGODA_SCHEDULER_CONSTRAINTS_GBNF_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_GBNF_H_

// EBNF grammars in the GBNF notation of llama.cpp (which vLLM's `grammar`
// takes through xgrammar) to a GrammarBuilder grammar:
//
//   root   ::= "{" ws pair ("," ws pair)* "}"    # rules: name ::= body
//   pair   ::= [a-z]+ ":" ws value
//   value  ::= [0-9]{1,3} | "true" | 'false' | ( "[" value? "]" ) | .
//   ws     ::= [ \t\n]*
//
// Literals in double or single quotes and classes `[...]` / `[^...]` with
// ranges take \n \r \t \\ \" \' \] \- \xHH \uHHHH \UHHHHHHHH; `.` is any
// character but a newline; grouping, alternation `|`, and * + ? {m} {m,}
// {m,n} {,n}; comments from `#` to the end of a line. A rule's body runs
// until the next `name ::=`. Characters are code points (UTF-8 in the
// bytes). The start rule is `root`. Refused, naming the rule or the offset:
// undefined rules, left recursion (a rule reaching itself before a
// character), rules that match nothing, syntax errors.

#include <string_view>

#include "absl/status/status.h"
#include "scheduler/constraints/grammar_builder.h"

namespace pagoda::constraints {

// Bounds: counts in {m,n} and rules per grammar.
inline constexpr int kMaxGbnfRepeat = 1000;
inline constexpr int kMaxGbnfRules = 4096;

// Adds `text`'s rules to `g` and makes `root` the root.
absl::Status BuildGbnfGrammar(std::string_view text, GrammarBuilder& g);

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_GBNF_H_
