#include "scheduler/constraints/regex.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/constraints/code_points.h"

namespace pagoda::constraints {
namespace {

constexpr int kMaxRegexGroupDepth = 64;

CodePointSet Ascii() { return CodePointSet::Range(0, 0x7F); }
CodePointSet Digits() { return CodePointSet::Range('0', '9'); }
CodePointSet WordCharacters() {
  CodePointSet s = Digits();
  s.Add('A', 'Z');
  s.Add('a', 'z');
  s.Add('_', '_');
  return s;
}
CodePointSet Whitespace() {
  CodePointSet s = CodePointSet::Range('\t', '\r');  // \t \n \v \f \r
  s.Add(' ', ' ');
  return s;
}
// The ASCII characters Python's \s matches (str.isspace): also the
// separators U+001C..U+001F. A negation must leave all of them out.
CodePointSet PythonAsciiWhitespace() {
  CodePointSet s = Whitespace();
  s.Add(0x1C, 0x1F);
  return s;
}

// One escape or character inside or outside a class.
struct Piece {
  CodePointSet set;
  CodePointSet excluded_by_negation;  // What a negated class holding it leaves out.
  bool single = true;     // One code point (may end or start a range).
  uint32_t code_point = 0;
  bool shorthand = false;  // \d \w \s or a negation: ASCII semantics.
};

class RegexParser {
 public:
  RegexParser(std::string_view pattern, GrammarBuilder& g, const RegexOptions& options)
      : pattern_(pattern), g_(g), options_(options) {}

  absl::StatusOr<ExprId> Parse();

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: ", what, " at offset ", pos_));
  }
  bool AtEnd() const { return pos_ >= pattern_.size(); }
  char Peek() const { return pattern_[pos_]; }
  bool Consume(char c) {
    if (AtEnd() || Peek() != c) return false;
    ++pos_;
    return true;
  }
  ExprId OfSet(const CodePointSet& set) {
    return options_.json_string ? JsonStringClass(g_, set) : Utf8Class(g_, set);
  }
  absl::StatusOr<uint32_t> NextCodePoint();
  absl::StatusOr<uint32_t> Hex(int digits);
  absl::StatusOr<ExprId> ParseAlternation(int depth);
  absl::StatusOr<ExprId> ParseConcatenation(int depth);
  absl::StatusOr<ExprId> ParseAtom(int depth);
  absl::StatusOr<ExprId> ParseGroup(int depth);
  absl::StatusOr<ExprId> ParseClass();
  absl::StatusOr<Piece> ParseClassPiece();
  absl::StatusOr<Piece> ParseEscape(bool in_class);
  // Reads {n}, {n,}, {,m} or {n,m} at pos_ when one is there.
  bool ReadBraces(int* min, int* max);
  absl::StatusOr<ExprId> ParseQuantifiers(ExprId atom);

  std::string_view pattern_;
  size_t pos_ = 0;
  GrammarBuilder& g_;
  const RegexOptions options_;
};

absl::StatusOr<uint32_t> RegexParser::NextCodePoint() {
  const uint8_t lead = static_cast<uint8_t>(pattern_[pos_]);
  const int length = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3
                                 : (lead >> 3) == 30 ? 4 : 0;
  if (length == 0 || pos_ + length > pattern_.size()) return Error("invalid UTF-8");
  uint32_t c = length == 1 ? lead : lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    const uint8_t byte = static_cast<uint8_t>(pattern_[pos_ + i]);
    if ((byte & 0xC0) != 0x80) return Error("invalid UTF-8");
    c = (c << 6) | (byte & 0x3F);
  }
  pos_ += length;
  return c;
}

absl::StatusOr<uint32_t> RegexParser::Hex(int digits) {
  uint32_t value = 0;
  for (int i = 0; i < digits; ++i) {
    if (AtEnd()) return Error("incomplete hex escape");
    const char c = pattern_[pos_++];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return Error("bad hex digit in escape");
    value = value * 16 + v;
  }
  if (value > kMaxCodePoint || (value >= 0xD800 && value <= 0xDFFF)) {
    return Error("escape names no character");
  }
  return value;
}

absl::StatusOr<Piece> RegexParser::ParseEscape(bool in_class) {
  ++pos_;  // The backslash.
  if (AtEnd()) return Error("pattern ends with a backslash");
  const char c = pattern_[pos_++];
  Piece piece;
  auto shorthand = [&](CodePointSet set, bool negated) {
    // Python's classes are Unicode; on ASCII they are these, except that
    // \s also holds U+001C..U+001F, which \S must not produce.
    const CodePointSet full = c == 's' || c == 'S' ? PythonAsciiWhitespace() : set;
    piece.set = negated ? Ascii().Minus(full) : set;
    piece.excluded_by_negation = negated ? piece.set : full;
    piece.single = false;
    piece.shorthand = true;
    return piece;
  };
  auto single = [&](uint32_t code_point) {
    piece.set = CodePointSet::Of(code_point);
    piece.excluded_by_negation = piece.set;
    piece.code_point = code_point;
    return piece;
  };
  switch (c) {
    case 'd': return shorthand(Digits(), false);
    case 'D': return shorthand(Digits(), true);
    case 'w': return shorthand(WordCharacters(), false);
    case 'W': return shorthand(WordCharacters(), true);
    case 's': return shorthand(Whitespace(), false);
    case 'S': return shorthand(Whitespace(), true);
    case 't': return single('\t');
    case 'n': return single('\n');
    case 'r': return single('\r');
    case 'f': return single('\f');
    case 'v': return single('\v');
    case 'a': return single('\a');
    case '0': return single(0);
    case 'b':
      if (in_class) return single('\b');
      return Error("word boundary \\b is not supported");
    case 'x': case 'u': case 'U': {
      absl::StatusOr<uint32_t> value = Hex(c == 'x' ? 2 : c == 'u' ? 4 : 8);
      if (!value.ok()) return value.status();
      return single(*value);
    }
  }
  if ((c >= '1' && c <= '9')) return Error("backreferences are not supported");
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
    return Error(absl::StrCat("escape \\", std::string(1, c), " is not supported"));
  }
  --pos_;
  absl::StatusOr<uint32_t> literal = NextCodePoint();
  if (!literal.ok()) return literal.status();
  return single(*literal);
}

absl::StatusOr<Piece> RegexParser::ParseClassPiece() {
  if (Peek() == '\\') return ParseEscape(/*in_class=*/true);
  if (Peek() == '[' && pos_ + 1 < pattern_.size() &&
      (pattern_[pos_ + 1] == ':' || pattern_[pos_ + 1] == '=' || pattern_[pos_ + 1] == '.')) {
    return Error("POSIX classes [: :] are not supported");
  }
  absl::StatusOr<uint32_t> c = NextCodePoint();
  if (!c.ok()) return c.status();
  Piece piece;
  piece.set = CodePointSet::Of(*c);
  piece.excluded_by_negation = piece.set;
  piece.code_point = *c;
  return piece;
}

absl::StatusOr<ExprId> RegexParser::ParseClass() {
  ++pos_;  // '['
  const bool negated = Consume('^');
  CodePointSet set;
  CodePointSet excluded;  // For a negated class.
  bool shorthand = false;
  bool first = true;
  while (true) {
    if (AtEnd()) return Error("unterminated character class");
    if (Peek() == ']' && !first) break;
    first = false;
    absl::StatusOr<Piece> lo = ParseClassPiece();
    if (!lo.ok()) return lo.status();
    shorthand = shorthand || lo->shorthand;
    if (lo->single && pos_ + 1 < pattern_.size() && Peek() == '-' && pattern_[pos_ + 1] != ']') {
      ++pos_;
      absl::StatusOr<Piece> hi = ParseClassPiece();
      if (!hi.ok()) return hi.status();
      if (!hi->single || hi->code_point < lo->code_point) return Error("bad range in class");
      set.Add(lo->code_point, hi->code_point);
      excluded.Add(lo->code_point, hi->code_point);
      continue;
    }
    set.Add(lo->set);
    excluded.Add(lo->excluded_by_negation);
  }
  ++pos_;  // ']'
  if (negated) set = shorthand ? Ascii().Minus(excluded) : excluded.Complement();
  if (set.Empty()) return Error("character class matches nothing");
  return OfSet(set);
}

absl::StatusOr<ExprId> RegexParser::ParseGroup(int depth) {
  ++pos_;  // '('
  if (Consume('?')) {
    if (Consume(':')) {
    } else if (Consume('P') || (!AtEnd() && Peek() == '<' && pos_ + 1 < pattern_.size() &&
                                pattern_[pos_ + 1] != '=' && pattern_[pos_ + 1] != '!')) {
      if (!Consume('<')) return Error("only named groups (?P<name>...) are supported after (?P");
      while (!AtEnd() && Peek() != '>') ++pos_;
      if (!Consume('>')) return Error("unterminated group name");
    } else if (!AtEnd() && (Peek() == '=' || Peek() == '!' || Peek() == '<')) {
      return Error("lookaround assertions are not supported");
    } else {
      return Error("inline flags and other (? groups are not supported");
    }
  }
  absl::StatusOr<ExprId> inner = ParseAlternation(depth + 1);
  if (!inner.ok()) return inner.status();
  if (!Consume(')')) return Error("missing )");
  return inner;
}

absl::StatusOr<ExprId> RegexParser::ParseAtom(int depth) {
  switch (Peek()) {
    case '(':
      return ParseGroup(depth);
    case '[':
      return ParseClass();
    case '.':
      ++pos_;
      return OfSet(CodePointSet::All().Minus(CodePointSet::Of('\n')));
    case '^':
    case '$':
      return Error("anchors are only supported at the start (^) and end ($) of the pattern");
    case '*':
    case '+':
    case '?':
      return Error("nothing to repeat");
    case '\\': {
      absl::StatusOr<Piece> piece = ParseEscape(/*in_class=*/false);
      if (!piece.ok()) return piece.status();
      return OfSet(piece->set);
    }
  }
  if (Peek() == '{') {
    const size_t start = pos_;
    int min = 0, max = 0;
    if (ReadBraces(&min, &max)) return Error("nothing to repeat");
    pos_ = start + 1;
    return OfSet(CodePointSet::Of('{'));
  }
  absl::StatusOr<uint32_t> c = NextCodePoint();
  if (!c.ok()) return c.status();
  return OfSet(CodePointSet::Of(*c));
}

bool RegexParser::ReadBraces(int* min, int* max) {
  size_t p = pos_ + 1;
  auto number = [&](int* out) {
    const size_t start = p;
    int64_t value = 0;
    while (p < pattern_.size() && pattern_[p] >= '0' && pattern_[p] <= '9') {
      value = std::min<int64_t>(value * 10 + (pattern_[p] - '0'), int64_t{1} << 30);
      ++p;
    }
    *out = static_cast<int>(value);
    return p > start;
  };
  const bool has_min = number(min);
  if (p < pattern_.size() && pattern_[p] == '}') {
    if (!has_min) return false;
    *max = *min;
  } else if (p < pattern_.size() && pattern_[p] == ',') {
    ++p;
    if (!number(max)) *max = kUnbounded;
    if (!has_min) *min = 0;
    if (p >= pattern_.size() || pattern_[p] != '}') return false;
  } else {
    return false;
  }
  pos_ = p + 1;
  return true;
}

absl::StatusOr<ExprId> RegexParser::ParseQuantifiers(ExprId atom) {
  while (!AtEnd()) {
    int min = 0, max = 0;
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : kUnbounded;
    } else if (c != '{' || !ReadBraces(&min, &max)) {
      break;
    }
    if (min > options_.max_repeat || max > options_.max_repeat) {
      return Error(absl::StrCat("repeat counts above ", options_.max_repeat,
                                " are not supported"));
    }
    if (max != kUnbounded && max < min) return Error("repeat {n,m} with m < n");
    if (Consume('+')) return Error("possessive quantifiers are not supported");
    Consume('?');  // Lazy: the same language.
    atom = g_.Repeat(atom, min, max);
  }
  return atom;
}

absl::StatusOr<ExprId> RegexParser::ParseConcatenation(int depth) {
  std::vector<ExprId> parts;
  while (!AtEnd() && Peek() != '|' && Peek() != ')') {
    absl::StatusOr<ExprId> atom = ParseAtom(depth);
    if (!atom.ok()) return atom.status();
    absl::StatusOr<ExprId> repeated = ParseQuantifiers(*atom);
    if (!repeated.ok()) return repeated.status();
    parts.push_back(*repeated);
  }
  return g_.Sequence(std::move(parts));
}

absl::StatusOr<ExprId> RegexParser::ParseAlternation(int depth) {
  if (depth > kMaxRegexGroupDepth) return Error("groups nest too deeply");
  std::vector<ExprId> branches;
  while (true) {
    absl::StatusOr<ExprId> branch = ParseConcatenation(depth);
    if (!branch.ok()) return branch.status();
    branches.push_back(*branch);
    if (!Consume('|')) break;
  }
  return g_.Choice(std::move(branches));
}

absl::StatusOr<ExprId> RegexParser::Parse() {
  if (!pattern_.empty() && pattern_.front() == '^') pattern_.remove_prefix(1);
  if (!pattern_.empty() && pattern_.back() == '$') {
    size_t backslashes = 0;
    while (backslashes + 1 < pattern_.size() &&
           pattern_[pattern_.size() - 2 - backslashes] == '\\') {
      ++backslashes;
    }
    if (backslashes % 2 == 0) pattern_.remove_suffix(1);
  }
  absl::StatusOr<ExprId> expr = ParseAlternation(0);
  if (!expr.ok()) return expr.status();
  if (!AtEnd()) return Error("unbalanced )");
  return expr;
}

}  // namespace

absl::StatusOr<ExprId> CompileRegex(std::string_view pattern, GrammarBuilder& g,
                                    const RegexOptions& options) {
  return RegexParser(pattern, g, options).Parse();
}

}  // namespace pagoda::constraints
