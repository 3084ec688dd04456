#include "scheduler/constraints/json_primitives.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "scheduler/constraints/code_points.h"
#include "scheduler/constraints/regex.h"

namespace pagoda::constraints {
namespace {

constexpr int64_t kLargestInteger = 999'999'999'999'999;  // kMaxIntegerDigits nines.
static_assert(kMaxIntegerDigits == 15);

ExprId DigitRange(GrammarBuilder& g, char lo, char hi) {
  return g.Bytes(ByteSet::Range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
}

ExprId AnyDigits(GrammarBuilder& g, int count) {
  return g.Repeat(DigitRange(g, '0', '9'), count, count);
}

bool AllOf(const std::string& s, size_t from, char c) {
  return std::all_of(s.begin() + from, s.end(), [c](char x) { return x == c; });
}

// Decimal strings of one length in [x, y] (x <= y), digit by digit.
ExprId SameLengthRange(GrammarBuilder& g, const std::string& x, const std::string& y) {
  if (x.empty()) return g.Empty();
  const size_t rest = x.size() - 1;
  if (x[0] == y[0]) {
    return g.Sequence({g.Byte(x[0]), SameLengthRange(g, x.substr(1), y.substr(1))});
  }
  if (AllOf(x, 1, '0') && AllOf(y, 1, '9')) {
    return g.Sequence({DigitRange(g, x[0], y[0]), AnyDigits(g, static_cast<int>(rest))});
  }
  std::vector<ExprId> alternatives = {
      g.Sequence({g.Byte(x[0]), SameLengthRange(g, x.substr(1), std::string(rest, '9'))})};
  if (y[0] - x[0] >= 2) {
    alternatives.push_back(
        g.Sequence({DigitRange(g, x[0] + 1, y[0] - 1), AnyDigits(g, static_cast<int>(rest))}));
  }
  alternatives.push_back(
      g.Sequence({g.Byte(y[0]), SameLengthRange(g, std::string(rest, '0'), y.substr(1))}));
  return g.Choice(std::move(alternatives));
}

// Non-negative integers in [a, b] without leading zeros. REQUIRES: 0 <= a <= b.
ExprId NonNegativeRange(GrammarBuilder& g, int64_t a, int64_t b) {
  const std::string low = std::to_string(a), high = std::to_string(b);
  std::vector<ExprId> alternatives;
  int64_t power = 1;  // 10^(length - 1)
  for (size_t length = 1; length <= high.size(); ++length, power *= 10) {
    if (length < low.size()) continue;
    const int64_t from = length == low.size() ? a : power;
    const int64_t to = length == high.size() ? b : power * 10 - 1;
    alternatives.push_back(SameLengthRange(g, std::to_string(from), std::to_string(to)));
  }
  return g.Choice(std::move(alternatives));
}

ExprId Fraction(GrammarBuilder& g) {
  return g.Sequence({g.Byte('.'), g.Repeat(DigitRange(g, '0', '9'), 1, kMaxFractionDigits)});
}

// Numbers of magnitude in [a, b] (integers, 0 <= a <= b): an integer part
// in [a, b - 1] with any fraction, or b with a zero fraction.
ExprId Magnitudes(GrammarBuilder& g, int64_t a, int64_t b) {
  std::vector<ExprId> alternatives;
  if (a <= b - 1) {
    alternatives.push_back(g.Sequence({NonNegativeRange(g, a, b - 1), g.Optional(Fraction(g))}));
  }
  alternatives.push_back(g.Sequence(
      {g.Literal(std::to_string(b)),
       g.Optional(g.Sequence({g.Byte('.'), g.Repeat(g.Byte('0'), 1, kMaxFractionDigits)}))}));
  return g.Choice(std::move(alternatives));
}

// A hex digit, and four of them naming a character that is not a surrogate.
ExprId HexDigit(GrammarBuilder& g) {
  ByteSet hex = ByteSet::Range('0', '9');
  hex.AddRange('a', 'f');
  hex.AddRange('A', 'F');
  return g.Bytes(hex);
}
ExprId NonSurrogateHex4(GrammarBuilder& g) {
  ByteSet first = ByteSet::Range('0', '9');
  first.AddRange('a', 'c');
  first.AddRange('A', 'C');
  first.AddRange('e', 'f');
  first.AddRange('E', 'F');
  ByteSet d;
  d.Add('d');
  d.Add('D');
  return g.Choice({g.Sequence({g.Bytes(first), HexDigit(g), HexDigit(g), HexDigit(g)}),
                   g.Sequence({g.Bytes(d), DigitRange(g, '0', '7'), HexDigit(g), HexDigit(g)})});
}

// One character inside a JSON string, escapes included.
ExprId JsonCharacter(GrammarBuilder& g) {
  CodePointSet plain = CodePointSet::All();
  CodePointSet escaped = CodePointSet::Range(0, 0x1F);
  escaped.Add('"', '"');
  escaped.Add('\\', '\\');
  ByteSet simple_escapes;
  for (char c : std::string("\"\\/bfnrt")) simple_escapes.Add(static_cast<uint8_t>(c));
  return g.Choice({Utf8Class(g, plain.Minus(escaped)),
                   g.Sequence({g.Byte('\\'), g.Bytes(simple_escapes)}),
                   g.Sequence({g.Literal("\\u"), NonSurrogateHex4(g)})});
}

// Regexes of the formats (ASCII only, so JSON escaping never applies).
// Each is a subset of what its RFC allows: dates without 29 February,
// IPv6 in its full eight-group form, e-mail and host names in plain ASCII.
const char* FormatPattern(const std::string& format) {
  if (format == "date") {
    return "\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|"
           "02-(0[1-9]|1\\d|2[0-8]))";
  }
  if (format == "time") {
    return "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
  }
  if (format == "date-time") {
    return "\\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|"
           "02-(0[1-9]|1\\d|2[0-8]))T([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?"
           "(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
  }
  if (format == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  if (format == "email") {
    return "[a-z0-9]{1,32}([._+-][a-z0-9]{1,32}){0,3}@[a-z0-9]{1,32}(-[a-z0-9]{1,32}){0,2}"
           "(\\.[a-z0-9]{1,32}){0,3}\\.[a-z]{2,6}";
  }
  if (format == "ipv4") {
    return "((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  }
  if (format == "ipv6") return "([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}";
  if (format == "hostname") {
    return "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?){0,3}";
  }
  if (format == "uri") return "https?://[a-z0-9]{1,32}(\\.[a-z0-9]{1,32}){0,3}(/[a-zA-Z0-9._~-]{0,32}){0,8}";
  return nullptr;
}

}  // namespace

ExprId JsonWhitespace(GrammarBuilder& g, const JsonGrammarOptions& options) {
  if (!options.any_whitespace) return g.Empty();
  ByteSet blanks;
  blanks.Add(' ');
  blanks.Add('\t');
  blanks.Add('\n');
  return g.Repeat(g.Bytes(blanks), 0, kMaxJsonWhitespace);
}

ExprId JsonString(GrammarBuilder& g, int min_length, int max_length) {
  return g.Sequence(
      {g.Byte('"'), g.Repeat(JsonCharacter(g), min_length, max_length), g.Byte('"')});
}

absl::StatusOr<ExprId> JsonPatternString(GrammarBuilder& g, const std::string& pattern) {
  absl::StatusOr<ExprId> body = CompileRegex(pattern, g, RegexOptions{.json_string = true});
  if (!body.ok()) return body.status();
  return g.Sequence({g.Byte('"'), *body, g.Byte('"')});
}

absl::StatusOr<ExprId> JsonFormatString(GrammarBuilder& g, const std::string& format) {
  const char* pattern = FormatPattern(format);
  if (pattern == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "format \"", format.substr(0, 64),
        "\" is not supported (date, time, date-time, uuid, email, ipv4, ipv6, hostname, uri)"));
  }
  return JsonPatternString(g, pattern);
}

absl::StatusOr<ExprId> JsonInteger(GrammarBuilder& g, std::optional<int64_t> lo,
                                   std::optional<int64_t> hi) {
  const int64_t low = std::max(lo.value_or(-kLargestInteger), -kLargestInteger);
  const int64_t high = std::min(hi.value_or(kLargestInteger), kLargestInteger);
  if (low > high) {
    return absl::InvalidArgumentError(
        absl::StrCat("no integer of at most ", kMaxIntegerDigits, " digits lies in the range"));
  }
  std::vector<ExprId> alternatives;
  if (high >= 0) alternatives.push_back(NonNegativeRange(g, std::max<int64_t>(low, 0), high));
  if (low < 0) {
    alternatives.push_back(g.Sequence(
        {g.Byte('-'), NonNegativeRange(g, high < 0 ? -high : 1, -low)}));
  }
  return g.Choice(std::move(alternatives));
}

absl::StatusOr<ExprId> JsonNumber(GrammarBuilder& g, std::optional<int64_t> lo,
                                  std::optional<int64_t> hi) {
  if (!lo.has_value() && !hi.has_value()) {
    ByteSet e, sign;
    e.Add('e');
    e.Add('E');
    sign.Add('+');
    sign.Add('-');
    const ExprId exponent = g.Sequence(
        {g.Bytes(e), g.Optional(g.Bytes(sign)), g.Repeat(DigitRange(g, '0', '9'), 1, 2)});
    return g.Sequence({g.Optional(g.Byte('-')), NonNegativeRange(g, 0, kLargestInteger),
                       g.Optional(Fraction(g)), g.Optional(exponent)});
  }
  const int64_t low = std::max(lo.value_or(-kLargestInteger), -kLargestInteger);
  const int64_t high = std::min(hi.value_or(kLargestInteger), kLargestInteger);
  if (low > high) {
    return absl::InvalidArgumentError("the range holds no integer, which this server needs");
  }
  std::vector<ExprId> alternatives;
  if (high >= 0) alternatives.push_back(Magnitudes(g, std::max<int64_t>(low, 0), high));
  if (low < 0) {
    alternatives.push_back(
        g.Sequence({g.Byte('-'), Magnitudes(g, std::max<int64_t>(-high, 0), -low)}));
  }
  return g.Choice(std::move(alternatives));
}

JsonValueRules AddJsonValueRules(GrammarBuilder& g, const JsonGrammarOptions& options) {
  JsonValueRules rules;
  rules.value = g.NewRule("json_value");
  rules.object = g.NewRule("json_object");
  const RuleId array = g.NewRule("json_array");
  auto ws = [&] { return JsonWhitespace(g, options); };
  auto separator = [&] { return g.Sequence({ws(), g.Byte(','), ws()}); };
  const ExprId member = g.Sequence(
      {JsonString(g, 0, kUnbounded), ws(), g.Byte(':'), ws(), g.Call(rules.value)});
  g.SetBody(rules.object,
            g.Sequence({g.Byte('{'), ws(),
                        g.Optional(g.Sequence({member, g.Star(g.Sequence({separator(), member}))})),
                        ws(), g.Byte('}')}));
  g.SetBody(array, g.Sequence({g.Byte('['), ws(),
                               g.Optional(g.Sequence(
                                   {g.Call(rules.value),
                                    g.Star(g.Sequence({separator(), g.Call(rules.value)}))})),
                               ws(), g.Byte(']')}));
  g.SetBody(rules.value,
            g.Choice({g.Call(rules.object), g.Call(array), JsonString(g, 0, kUnbounded),
                      *JsonNumber(g, std::nullopt, std::nullopt), g.Literal("true"),
                      g.Literal("false"), g.Literal("null")}));
  return rules;
}

}  // namespace pagoda::constraints
