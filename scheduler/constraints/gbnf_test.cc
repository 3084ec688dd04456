#include "scheduler/constraints/gbnf.h"

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "scheduler/constraints/matcher.h"
#include "tests/constraints/mask_check.h"

namespace pagoda::constraints {
namespace {

std::shared_ptr<const TokenVocabulary> AsciiVocabulary() {
  std::vector<std::optional<std::string>> tokens = {std::nullopt};
  for (int b = 0x09; b < 0x7F; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* piece : {"ab", "()", "+1", "\xC3\xA9", "caf", "\xE6\x9D\xB1"}) tokens.push_back(piece);
  const int size = static_cast<int>(tokens.size());
  return *TokenVocabulary::Create(std::move(tokens), size);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const std::string& text) {
  GrammarBuilder g;
  if (absl::Status status = BuildGbnfGrammar(text, g); !status.ok()) return status;
  return CompiledGrammar::Create(g, AsciiVocabulary());
}

bool Accepts(const std::shared_ptr<const CompiledGrammar>& grammar, const std::string& text) {
  Matcher matcher(grammar);
  return matcher.AcceptBytes(text) && matcher.CanEnd();
}

TEST(GbnfTest, ParsesRulesLiteralsClassesAndRepetitions) {
  auto grammar = Compile(R"g(
    # A comment.
    root ::= greeting ("," ws greeting){0,2} "!"?
    greeting ::= 'hi' | "h\x65llo" | [A-Z] [a-z]{1,3} | "caf\u00e9"
    ws ::= [ \t]*
  )g");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_TRUE(Accepts(*grammar, "hi"));
  EXPECT_TRUE(Accepts(*grammar, "hello,  Abc,\tcaf\xC3\xA9!"));
  EXPECT_FALSE(Accepts(*grammar, "hi,hi,hi,hi"));
  EXPECT_FALSE(Accepts(*grammar, "Abcde"));
  EXPECT_FALSE(Accepts(*grammar, "cafe"));
}

TEST(GbnfTest, RecursiveRulesAndMasks) {
  auto grammar = Compile(R"g(root ::= expr
expr ::= term ("+" term)*
term ::= [0-9]+ | "(" expr ")" | "-" term)g");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_TRUE(Accepts(*grammar, "(1+(2+-3))+4"));
  EXPECT_FALSE(Accepts(*grammar, "(1+2"));
  std::mt19937_64 rng(9);
  for (int walk = 0; walk < 20; ++walk) testing::RandomWalk(Matcher(*grammar), rng, 25);
}

TEST(GbnfTest, RefusesBrokenGrammarsNamingTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"root ::= item\n", "item"},                              // Undefined rule.
      {"start ::= \"a\"", "root"},                              // No root.
      {"root ::= root \"a\" | \"b\"", "left-recursive"},
      {"root ::= \"a\" (\"b\"", "missing )"},
      {"root ::= \"abc", "unterminated"},
      {"root ::= [z-a]", "range"},
      {"root ::= \"a\"{3,1}", "n < m"},
      {"root ::= \"a\"\nroot ::= \"b\"", "twice"},
      {"root ::= \"\\q\"", "escape"},
      {"root ::= \"a\"{5000}", "repetition"},
  };
  for (const auto& [text, fragment] : cases) {
    SCOPED_TRACE(text);
    auto grammar = Compile(text);
    ASSERT_FALSE(grammar.ok());
    EXPECT_NE(grammar.status().message().find(fragment), std::string::npos) << grammar.status();
  }
}

}  // namespace
}  // namespace pagoda::constraints
