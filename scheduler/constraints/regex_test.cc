#include "scheduler/constraints/regex.h"

#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/constraints/matcher.h"
#include "tests/constraints/mask_check.h"

namespace pagoda::constraints {
namespace {

// Single printable ASCII bytes, newline and tab, and a few two-byte tokens.
std::shared_ptr<const TokenVocabulary> AsciiVocabulary() {
  std::vector<std::optional<std::string>> tokens = {std::nullopt};
  for (int c = 0x20; c < 0x7F; ++c) tokens.push_back(std::string(1, static_cast<char>(c)));
  tokens.push_back("\n");
  tokens.push_back("\t");
  for (const char* t : {"ab", "12", "a1", "-_", "..", "xyz", "\xC3\xA9", "\xE2\x82\xAC"}) {
    tokens.push_back(std::string(t));
  }
  const int size = static_cast<int>(tokens.size());
  return *TokenVocabulary::Create(std::move(tokens), size);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompilePattern(const std::string& pattern) {
  GrammarBuilder g;
  const RuleId root = g.NewRule("root");
  absl::StatusOr<ExprId> expr = CompileRegex(pattern, g);
  if (!expr.ok()) return expr.status();
  g.SetBody(root, *expr);
  return CompiledGrammar::Create(g, AsciiVocabulary());
}

bool FullMatch(const CompiledGrammar& grammar, const std::string& text) {
  Matcher matcher(std::shared_ptr<const CompiledGrammar>(&grammar, [](const CompiledGrammar*) {}));
  return matcher.AcceptBytes(text) && matcher.CanEnd();
}

const char* const kPatterns[] = {
    "abc", "a|b|cd", "a*b+c?", "(ab)*", "(?:a|bc){2,3}", "[a-c]{1,4}x", "[^a-c]{2}",
    "\\d{3}-\\d{4}", "\\w+@\\w+\\.com", "[A-Z][a-z]*( [A-Z][a-z]*)*", "x{0,2}y{2,}",
    "(a|ab)(c|bcd)(d*)", ".{3}", "[\\d.]+", "\\s*\\S\\s*", "-?(0|[1-9][0-9]*)(\\.[0-9]+)?",
    "^start$", "[a-]+", "\\[\\]\\(\\)\\{\\}", "(a(b(c)?)?)?", "[^\\d\\s]{1,3}",
    "a{,3}", "(?P<name>ab)+",
};

TEST(RegexTest, FullMatchAgreesWithStdRegex) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "abcdxyzABZ0129-_.@ []()om\t";
  for (const char* pattern : kPatterns) {
    SCOPED_TRACE(pattern);
    auto grammar = CompilePattern(pattern);
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    std::string ecma = pattern;
    if (ecma == "a{,3}") ecma = "a{0,3}";
    if (ecma == "(?P<name>ab)+") ecma = "(ab)+";
    const std::regex reference(ecma, std::regex::ECMAScript);
    for (int i = 0; i < 400; ++i) {
      std::string text;
      const int length = static_cast<int>(rng() % 9);
      for (int j = 0; j < length; ++j) text += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(FullMatch(**grammar, text), std::regex_match(text, reference)) << "'" << text << "'";
    }
    // Texts the grammar generates must match, and the masks must be exact.
    for (int walk = 0; walk < 20; ++walk) {
      const std::string text = testing::RandomWalk(Matcher(*grammar), rng, 12, 3, true);
      Matcher check(*grammar);
      if (check.AcceptBytes(text) && check.CanEnd()) {
        EXPECT_TRUE(std::regex_match(text, reference)) << "'" << text << "'";
      }
    }
  }
}

TEST(RegexTest, RefusesWhatItCannotMatchExactly) {
  for (const char* pattern : {"(a)\\1", "a(?=b)", "a(?!b)", "(?<=a)b", "\\bword", "a^b", "a$b",
                              "(?i)abc", "a*+", "[[:alpha:]]", "(ab", "ab)", "*a", "a{5,2}",
                              "\\p{L}", "a{2000}"}) {
    SCOPED_TRACE(pattern);
    EXPECT_FALSE(CompilePattern(pattern).ok());
  }
}

// A short pattern can cost far more to compile than its size suggests: the
// subset construction of `.*a.*.{1000}` follows thousands of NFA states for
// each of its thousands of DFA states (80 million steps, most of a second).
// The step budget refuses it, and the DFA-state bound refuses `[ab]*a[ab]{20}`
// (2^20 states, each small); their smaller siblings still compile.
TEST(RegexTest, RefusesPatternsTooCostlyToCompile) {
  const std::pair<const char*, const char*> refused[] = {
      {".*a.*.{1000}", "compile steps"}, {"[ab]*a[ab]{20}", "automaton states"}};
  for (const auto& [pattern, why] : refused) {
    SCOPED_TRACE(pattern);
    auto grammar = CompilePattern(pattern);
    ASSERT_FALSE(grammar.ok());
    EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(grammar.status().message().find(why), std::string::npos) << grammar.status();
  }
  const std::pair<const char*, std::string> compiled[] = {
      {".*a.*.{100}", "xa" + std::string(100, 'b')}, {"[ab]*a[ab]{8}", "ba" + std::string(8, 'b')}};
  for (const auto& [pattern, text] : compiled) {
    SCOPED_TRACE(pattern);
    auto grammar = CompilePattern(pattern);
    ASSERT_TRUE(grammar.ok()) << grammar.status();
    EXPECT_TRUE(FullMatch(**grammar, text));
    EXPECT_FALSE(FullMatch(**grammar, text.substr(0, 9)));  // Too short.
  }
}

TEST(RegexTest, UnicodeClassesMatchWholeCharacters) {
  auto grammar = CompilePattern("[^a]{2}");
  ASSERT_TRUE(grammar.ok());
  EXPECT_TRUE(FullMatch(**grammar, "\xC3\xA9\xE2\x82\xAC"));  // é€
  EXPECT_FALSE(FullMatch(**grammar, "\xC3\xA9" "a"));
  EXPECT_FALSE(FullMatch(**grammar, "\xC3\xC3"));  // Not UTF-8.
  // Python's "[]a]": a class of ']' and 'a' (ECMAScript reads an empty class).
  auto bracket = CompilePattern("[]a]+");
  ASSERT_TRUE(bracket.ok());
  EXPECT_TRUE(FullMatch(**bracket, "]a]"));
  auto dot = CompilePattern(".");
  ASSERT_TRUE(dot.ok());
  EXPECT_FALSE(FullMatch(**dot, "\n"));
  EXPECT_FALSE(FullMatch(**dot, "\xED\xA0\x80"));  // A surrogate.
  EXPECT_TRUE(FullMatch(**dot, "\xF0\x9F\x99\x82"));
}

TEST(RegexTest, JsonStringModeEscapes) {
  GrammarBuilder g;
  const RuleId root = g.NewRule("root");
  absl::StatusOr<ExprId> expr = CompileRegex("a\"\\\\\\n", g, RegexOptions{.json_string = true});
  ASSERT_TRUE(expr.ok()) << expr.status();
  g.SetBody(root, *expr);
  auto grammar = CompiledGrammar::Create(g, AsciiVocabulary());
  ASSERT_TRUE(grammar.ok());
  EXPECT_TRUE(FullMatch(**grammar, "a\\\"\\\\\\n"));
  EXPECT_FALSE(FullMatch(**grammar, "a\"\\\n"));
}

}  // namespace
}  // namespace pagoda::constraints
