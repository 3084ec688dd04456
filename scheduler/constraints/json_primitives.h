#ifndef PAGODA_SCHEDULER_CONSTRAINTS_JSON_PRIMITIVES_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_JSON_PRIMITIVES_H_

// The JSON pieces the schema compiler (json_schema.h) assembles: whitespace,
// strings (with lengths, a pattern or a format), integers and numbers in
// ranges, and the rules of an arbitrary JSON value. Each writes a subset of
// the JSON texts that mean the value (never a text outside it): numbers
// without leading zeros, at most kMaxIntegerDigits integer digits and
// kMaxFractionDigits fraction digits, exponents only when no range is set;
// whitespace between tokens up to JsonWhitespace's bound. The bounds keep a
// sampler that never likes to stop (a random model) from writing numbers or
// blanks without end.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "scheduler/constraints/grammar_builder.h"

namespace pagoda::constraints {

inline constexpr int kMaxIntegerDigits = 15;
inline constexpr int kMaxFractionDigits = 15;
inline constexpr int kMaxJsonWhitespace = 12;

struct JsonGrammarOptions {
  // Whitespace between tokens: up to kMaxJsonWhitespace of space, tab and
  // newline (pretty-printed JSON); false: none (compact JSON).
  bool any_whitespace = true;
};

// Whitespace between two JSON tokens.
ExprId JsonWhitespace(GrammarBuilder& g, const JsonGrammarOptions& options);

// A JSON string whose value has [min_length, max_length] characters
// (max_length kUnbounded for none); every escape JSON allows is accepted
// (\uXXXX but for surrogates, so each escape is one character).
ExprId JsonString(GrammarBuilder& g, int min_length, int max_length);
// A JSON string whose value fully matches `pattern` (regex.h).
absl::StatusOr<ExprId> JsonPatternString(GrammarBuilder& g, const std::string& pattern);
// A JSON string in `format` (date, time, date-time, uuid, email, ipv4,
// ipv6, hostname, uri); INVALID_ARGUMENT for any other.
absl::StatusOr<ExprId> JsonFormatString(GrammarBuilder& g, const std::string& format);

// An integer in [lo, hi]; unset bounds are those of kMaxIntegerDigits
// digits. INVALID_ARGUMENT if the range is empty.
absl::StatusOr<ExprId> JsonInteger(GrammarBuilder& g, std::optional<int64_t> lo,
                                   std::optional<int64_t> hi);
// A number in [lo, hi] (integer bounds; unset ones as JsonInteger's), with
// an optional fraction; with neither bound, also an optional exponent.
absl::StatusOr<ExprId> JsonNumber(GrammarBuilder& g, std::optional<int64_t> lo,
                                  std::optional<int64_t> hi);

// The rules of any JSON value and any JSON object, made once per builder.
struct JsonValueRules {
  RuleId value = -1;
  RuleId object = -1;
};
JsonValueRules AddJsonValueRules(GrammarBuilder& g, const JsonGrammarOptions& options);

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_JSON_PRIMITIVES_H_
