#include "scheduler/constraints/gbnf.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "scheduler/constraints/code_points.h"

namespace pagoda::constraints {
namespace {

constexpr int kMaxGrammarGroupDepth = 64;

bool IsNameByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, GrammarBuilder& g) : text_(text), g_(g) {}
  absl::Status Parse();

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("grammar: ", what, " at offset ", pos_));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }
  void SkipSpace();
  std::string ReadName();
  bool AtRuleStart();
  RuleId RuleOf(const std::string& name);
  absl::StatusOr<uint32_t> CodePoint(bool in_class);
  absl::StatusOr<uint32_t> Hex(int digits);
  absl::StatusOr<ExprId> Literal(char quote);
  absl::StatusOr<ExprId> Class();
  absl::StatusOr<ExprId> Atom(int depth);
  absl::StatusOr<ExprId> Postfix(ExprId atom);
  absl::StatusOr<ExprId> Sequence(int depth);
  absl::StatusOr<ExprId> Alternation(int depth);
  bool ReadCount(int* value);

  std::string_view text_;
  size_t pos_ = 0;
  GrammarBuilder& g_;
  absl::flat_hash_map<std::string, RuleId> rules_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;  // Where each rule was first named.
};

void GbnfParser::SkipSpace() {
  while (!AtEnd()) {
    const char c = Peek();
    if (c == '#') {
      while (!AtEnd() && Peek() != '\n') ++pos_;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++pos_;
    } else {
      return;
    }
  }
}

std::string GbnfParser::ReadName() {
  const size_t start = pos_;
  while (!AtEnd() && IsNameByte(Peek())) ++pos_;
  return std::string(text_.substr(start, pos_ - start));
}

bool GbnfParser::AtRuleStart() {
  const size_t start = pos_;
  const bool named = !ReadName().empty();
  SkipSpace();
  const bool defines = named && text_.substr(pos_, 3) == "::=";
  pos_ = start;
  return defines;
}

RuleId GbnfParser::RuleOf(const std::string& name) {
  auto [it, inserted] = rules_.try_emplace(name, -1);
  if (inserted) {
    it->second = g_.NewRule(name);
    defined_.push_back(false);
    first_use_.push_back(pos_);
  }
  return it->second;
}

absl::StatusOr<uint32_t> GbnfParser::Hex(int digits) {
  uint32_t value = 0;
  for (int i = 0; i < digits; ++i) {
    if (AtEnd()) return Error("incomplete hex escape");
    const char c = text_[pos_++];
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return Error("bad hex digit");
    value = value * 16 + v;
  }
  if (value > kMaxCodePoint || (value >= 0xD800 && value <= 0xDFFF)) {
    return Error("escape names no character");
  }
  return value;
}

// One character of a literal or class, escapes decoded.
absl::StatusOr<uint32_t> GbnfParser::CodePoint(bool in_class) {
  if (AtEnd()) return Error("unterminated literal or class");
  if (Peek() == '\\') {
    ++pos_;
    if (AtEnd()) return Error("unterminated escape");
    const char c = text_[pos_++];
    switch (c) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case '0': return uint32_t{0};
      case 'x': return Hex(2);
      case 'u': return Hex(4);
      case 'U': return Hex(8);
      case '\\': case '"': case '\'': case ']': case '[': case '-': case '^': case '/':
        return static_cast<uint32_t>(c);
    }
    return Error(absl::StrCat("unknown escape \\", std::string(1, c)));
  }
  (void)in_class;
  const uint8_t lead = static_cast<uint8_t>(text_[pos_]);
  const int length = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3
                                 : (lead >> 3) == 30 ? 4 : 0;
  if (length == 0 || pos_ + length > text_.size()) return Error("invalid UTF-8");
  uint32_t c = length == 1 ? lead : lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) c = (c << 6) | (static_cast<uint8_t>(text_[pos_ + i]) & 0x3F);
  pos_ += length;
  return c;
}

absl::StatusOr<ExprId> GbnfParser::Literal(char quote) {
  ++pos_;
  std::string bytes;
  while (true) {
    if (AtEnd()) return Error("unterminated literal");
    if (Peek() == quote) break;
    absl::StatusOr<uint32_t> c = CodePoint(false);
    if (!c.ok()) return c.status();
    AppendUtf8(*c, &bytes);
  }
  ++pos_;
  return g_.Literal(bytes);
}

absl::StatusOr<ExprId> GbnfParser::Class() {
  ++pos_;  // '['
  const bool negated = !AtEnd() && Peek() == '^';
  if (negated) ++pos_;
  CodePointSet set;
  while (true) {
    if (AtEnd()) return Error("unterminated character class");
    if (Peek() == ']') break;
    absl::StatusOr<uint32_t> lo = CodePoint(true);
    if (!lo.ok()) return lo.status();
    uint32_t hi = *lo;
    if (pos_ + 1 < text_.size() && Peek() == '-' && text_[pos_ + 1] != ']') {
      ++pos_;
      absl::StatusOr<uint32_t> end = CodePoint(true);
      if (!end.ok()) return end.status();
      if (*end < *lo) return Error("bad range in class");
      hi = *end;
    }
    set.Add(*lo, hi);
  }
  ++pos_;
  if (negated) set = set.Complement();
  if (set.Empty()) return Error("character class matches nothing");
  return Utf8Class(g_, set);
}

absl::StatusOr<ExprId> GbnfParser::Atom(int depth) {
  const char c = Peek();
  if (c == '"' || c == '\'') return Literal(c);
  if (c == '[') return Class();
  if (c == '.') {
    ++pos_;
    return Utf8Class(g_, CodePointSet::All().Minus(CodePointSet::Of('\n')));
  }
  if (c == '(') {
    ++pos_;
    absl::StatusOr<ExprId> inner = Alternation(depth + 1);
    if (!inner.ok()) return inner.status();
    SkipSpace();
    if (AtEnd() || Peek() != ')') return Error("missing )");
    ++pos_;
    return inner;
  }
  const std::string name = ReadName();
  if (name.empty()) return Error(absl::StrCat("unexpected '", std::string(1, c), "'"));
  if (rules_.size() >= kMaxGbnfRules && !rules_.contains(name)) {
    return Error(absl::StrCat("more than ", kMaxGbnfRules, " rules"));
  }
  return g_.Call(RuleOf(name));
}

bool GbnfParser::ReadCount(int* value) {
  const size_t start = pos_;
  int64_t v = 0;
  while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
    v = std::min<int64_t>(v * 10 + (Peek() - '0'), int64_t{1} << 30);
    ++pos_;
  }
  *value = static_cast<int>(v);
  return pos_ > start;
}

absl::StatusOr<ExprId> GbnfParser::Postfix(ExprId atom) {
  while (!AtEnd()) {
    const char c = Peek();
    int min = 0, max = 0;
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : kUnbounded;
    } else if (c == '{') {
      ++pos_;
      SkipSpace();
      const bool has_min = ReadCount(&min);
      SkipSpace();
      if (!AtEnd() && Peek() == ',') {
        ++pos_;
        SkipSpace();
        if (!ReadCount(&max)) max = kUnbounded;
        SkipSpace();
      } else if (has_min) {
        max = min;
      } else {
        return Error("bad repetition {m,n}");
      }
      if (AtEnd() || Peek() != '}') return Error("bad repetition {m,n}");
      ++pos_;
    } else {
      break;
    }
    if (min > kMaxGbnfRepeat || max > kMaxGbnfRepeat) {
      return Error(absl::StrCat("repetition counts above ", kMaxGbnfRepeat, " are not supported"));
    }
    if (max != kUnbounded && max < min) return Error("repetition {m,n} with n < m");
    atom = g_.Repeat(atom, min, max);
  }
  return atom;
}

absl::StatusOr<ExprId> GbnfParser::Sequence(int depth) {
  std::vector<ExprId> parts;
  while (true) {
    SkipSpace();
    if (AtEnd() || Peek() == '|' || Peek() == ')' || AtRuleStart()) break;
    absl::StatusOr<ExprId> atom = Atom(depth);
    if (!atom.ok()) return atom.status();
    absl::StatusOr<ExprId> repeated = Postfix(*atom);
    if (!repeated.ok()) return repeated.status();
    parts.push_back(*repeated);
  }
  return g_.Sequence(std::move(parts));
}

absl::StatusOr<ExprId> GbnfParser::Alternation(int depth) {
  if (depth > kMaxGrammarGroupDepth) return Error("groups nest too deeply");
  std::vector<ExprId> alternatives;
  while (true) {
    absl::StatusOr<ExprId> sequence = Sequence(depth);
    if (!sequence.ok()) return sequence.status();
    alternatives.push_back(*sequence);
    SkipSpace();
    if (AtEnd() || Peek() != '|') break;
    ++pos_;
  }
  return g_.Choice(std::move(alternatives));
}

absl::Status GbnfParser::Parse() {
  SkipSpace();
  while (!AtEnd()) {
    const std::string name = ReadName();
    if (name.empty()) return Error("expected a rule name");
    SkipSpace();
    if (text_.substr(pos_, 3) != "::=") return Error(absl::StrCat("expected ::= after ", name));
    pos_ += 3;
    const RuleId rule = RuleOf(name);
    if (defined_[rule]) return Error(absl::StrCat("rule ", name, " is defined twice"));
    defined_[rule] = true;
    absl::StatusOr<ExprId> body = Alternation(0);
    if (!body.ok()) return body.status();
    if (!AtEnd() && !AtRuleStart()) return Error("unexpected character");
    g_.SetBody(rule, *body);
    SkipSpace();
  }
  if (!rules_.contains("root")) return absl::InvalidArgumentError("grammar: no rule named root");
  for (const auto& [name, rule] : rules_) {
    if (!defined_[rule]) {
      return absl::InvalidArgumentError(absl::StrCat("grammar: rule ", name, " (used at offset ",
                                                     first_use_[rule], ") is not defined"));
    }
  }
  g_.SetRoot(rules_["root"]);
  return absl::OkStatus();
}

}  // namespace

absl::Status BuildGbnfGrammar(std::string_view text, GrammarBuilder& g) {
  return GbnfParser(text, g).Parse();
}

}  // namespace pagoda::constraints
