#ifndef PAGODA_SCHEDULER_CONSTRAINTS_REGEX_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_REGEX_H_

// Regular expressions (the `regex` constraint and JSON Schema's `pattern`)
// to grammar expressions. The syntax is the part of Python's `re` (and
// ECMAScript's) that describes a regular language over characters:
// literals, `.`, classes `[...]` and `[^...]` with ranges, \d \w \s and
// their negations, escapes (\t \n \r \f \v \0 \xHH \uHHHH \UHHHHHHHH and
// escaped punctuation), groups `(...)`, `(?:...)` and named groups,
// alternation, and the quantifiers * + ? {n} {n,} {,m} {n,m} (a trailing `?`
// makes one lazy, which does not change the language). A `^` at the very
// start and a `$` at the very end are dropped: the whole text must match.
// Anything else (backreferences, lookaround, word boundaries, anchors inside
// the pattern, inline flags, possessive quantifiers, POSIX classes) is
// refused by name, never approximated.
//
// \d, \w and \s match ASCII digits, word characters and whitespace (a subset
// of what Python's Unicode classes match, so every generated text still
// matches), and their negations (and negated classes holding them) only
// ASCII characters, for the same reason. `.` matches any character but
// "\n".

#include <string_view>

#include "absl/status/statusor.h"
#include "scheduler/constraints/grammar_builder.h"

namespace pagoda::constraints {

struct RegexOptions {
  // Characters are written as inside a JSON string (JsonStringClass): for a
  // `pattern`, which constrains the string's value, not its JSON text.
  bool json_string = false;
  // Bound on {n,m} counts.
  int max_repeat = 1000;
};

// The expression of `pattern` (UTF-8), built in `g`. INVALID_ARGUMENT names
// the construct and its offset.
absl::StatusOr<ExprId> CompileRegex(std::string_view pattern, GrammarBuilder& g,
                                    const RegexOptions& options = {});

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_REGEX_H_
