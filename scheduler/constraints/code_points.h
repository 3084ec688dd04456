#ifndef PAGODA_SCHEDULER_CONSTRAINTS_CODE_POINTS_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_CODE_POINTS_H_

// Sets of Unicode code points (regex classes, JSON string characters) and
// their compilation to UTF-8 byte expressions, so that grammars over bytes
// match characters exactly: only well-formed UTF-8 encodings of the set's
// code points, never a surrogate.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/constraints/grammar_builder.h"

namespace pagoda::constraints {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, disjoint, non-adjacent closed ranges of code points.
class CodePointSet {
 public:
  CodePointSet() = default;
  static CodePointSet Range(uint32_t lo, uint32_t hi) {
    CodePointSet s;
    s.Add(lo, hi);
    return s;
  }
  static CodePointSet Of(uint32_t c) { return Range(c, c); }
  // Every code point but the surrogates.
  static CodePointSet All();

  void Add(uint32_t lo, uint32_t hi);
  void Add(const CodePointSet& other);
  bool Contains(uint32_t c) const;
  bool Empty() const { return ranges_.empty(); }
  // The code points (surrogates excluded) not in this set.
  CodePointSet Complement() const;
  CodePointSet Intersect(const CodePointSet& other) const;
  CodePointSet Minus(const CodePointSet& other) const { return Intersect(other.Complement()); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// The UTF-8 encoding of `c`, appended to `out`. REQUIRES: c <= kMaxCodePoint.
void AppendUtf8(uint32_t c, std::string* out);

// One character of `set`, as its UTF-8 bytes.
ExprId Utf8Class(GrammarBuilder& g, const CodePointSet& set);

// One character of `set` as it is written inside a JSON string: `"`, `\`
// and the control characters U+0000..U+001F by their escapes (\" \\ \b \f
// \n \r \t, else \u00XX), every other character as its UTF-8 bytes.
ExprId JsonStringClass(GrammarBuilder& g, const CodePointSet& set);

// `text` (UTF-8) written inside a JSON string, as JsonStringClass spells
// each character.
std::string JsonEscape(const std::string& text);

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_CODE_POINTS_H_
