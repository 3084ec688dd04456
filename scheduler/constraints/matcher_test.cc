#include "scheduler/constraints/matcher.h"

#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "scheduler/constraints/gbnf.h"
#include "tests/constraints/mask_check.h"

namespace pagoda::constraints {
namespace {

// Every string of 1 to `max_length` bytes over `alphabet`, plus a special
// token (no bytes) at id 0.
std::shared_ptr<const TokenVocabulary> AlphabetVocabulary(const std::string& alphabet,
                                                          int max_length) {
  std::vector<std::optional<std::string>> tokens = {std::nullopt};
  std::vector<std::string> layer = {""};
  for (int length = 1; length <= max_length; ++length) {
    std::vector<std::string> next;
    for (const std::string& prefix : layer) {
      for (char c : alphabet) next.push_back(prefix + c);
    }
    for (const std::string& t : next) tokens.push_back(t);
    layer = next;
  }
  const int size = static_cast<int>(tokens.size());
  return *TokenVocabulary::Create(std::move(tokens), size + 7);
}

// list ::= "[" (item ("," item)*)? "]" ; item ::= [0-9]+ | list | "a"*
GrammarBuilder NestedLists() {
  GrammarBuilder g;
  const RuleId list = g.NewRule("list");
  const RuleId item = g.NewRule("item");
  const ExprId items = g.Sequence({g.Call(item), g.Star(g.Sequence({g.Byte(','), g.Call(item)}))});
  g.SetBody(list, g.Sequence({g.Byte('['), g.Optional(items), g.Byte(']')}));
  g.SetBody(item, g.Choice({g.Plus(g.Bytes(ByteSet::Range('0', '9'))), g.Call(list),
                            g.Star(g.Byte('a'))}));
  g.SetRoot(list);
  return g;
}

TEST(MatcherTest, MaskEqualsBruteForceOnNestedLists) {
  auto grammar = CompiledGrammar::Create(NestedLists(), AlphabetVocabulary("[],0a1", 3));
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  std::mt19937_64 rng(1);
  for (int walk = 0; walk < 40; ++walk) {
    testing::RandomWalk(Matcher(*grammar), rng, 30);
  }
}

TEST(MatcherTest, AcceptsAndRefusesBytes) {
  auto grammar = CompiledGrammar::Create(NestedLists(), AlphabetVocabulary("[],0a1", 2));
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  Matcher matcher(*grammar);
  EXPECT_FALSE(matcher.CanEnd());
  EXPECT_FALSE(matcher.AcceptBytes("]"));
  EXPECT_TRUE(matcher.AcceptBytes("[1,[aa],"));
  EXPECT_FALSE(matcher.CanEnd());
  EXPECT_FALSE(matcher.AcceptBytes("]]"));  // "," needs an item first... "" is an item.
  EXPECT_TRUE(matcher.AcceptBytes("]"));
  EXPECT_TRUE(matcher.CanEnd());
  EXPECT_FALSE(matcher.CanContinue());
  EXPECT_FALSE(matcher.AcceptBytes("["));
}

TEST(MatcherTest, RefusesLeftRecursionAndEmptyLanguages) {
  GrammarBuilder left;
  const RuleId r = left.NewRule("expr");
  left.SetBody(r, left.Choice({left.Sequence({left.Call(r), left.Byte('+')}), left.Byte('1')}));
  auto compiled = CompiledGrammar::Create(left, AlphabetVocabulary("1+", 1));
  EXPECT_FALSE(compiled.ok());
  EXPECT_NE(compiled.status().message().find("left-recursive"), std::string::npos);

  GrammarBuilder empty;
  const RuleId e = empty.NewRule("root");
  empty.SetBody(e, empty.Sequence({empty.Byte('a'), empty.Nothing()}));
  EXPECT_FALSE(CompiledGrammar::Create(empty, AlphabetVocabulary("a", 1)).ok());
}

TEST(MatcherTest, CopiesAreIndependent) {
  auto grammar = CompiledGrammar::Create(NestedLists(), AlphabetVocabulary("[],0a1", 2));
  ASSERT_TRUE(grammar.ok());
  Matcher a(*grammar);
  ASSERT_TRUE(a.AcceptBytes("[[1"));
  Matcher b = a;
  ASSERT_TRUE(b.AcceptBytes("]]"));
  EXPECT_TRUE(b.CanEnd());
  EXPECT_FALSE(a.CanEnd());
  EXPECT_TRUE(a.AcceptBytes(",2]]"));
  EXPECT_TRUE(a.CanEnd());
}

// Found by the constraint fuzzer: `term` may start over at any byte, so
// every byte opens parses that nest one level deeper; 800 bytes held over
// 35,000 stacks and 19 GB. Past kMaxOpenStacks the text is refused.
TEST(MatcherTest, AGrammarThatOpensTooManyParsesRefusesTheTextInsteadOfGrowing) {
  GrammarBuilder g;
  ASSERT_TRUE(BuildGbnfGrammar("root ::= expr\n"
                               "expr ::= term (\"+\" term)*\n"
                               "term ::= [0-9]+ | . expr\n",
                               g)
                  .ok());
  auto grammar = CompiledGrammar::Create(g, AlphabetVocabulary("+1", 2));
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  Matcher short_text(*grammar);
  EXPECT_TRUE(short_text.AcceptBytes("1+1+1+11"));
  EXPECT_TRUE(short_text.CanEnd());
  const absl::Time start = absl::Now();
  Matcher long_text(*grammar);
  bool accepted = true;
  int accepted_bytes = 0;
  for (; accepted_bytes < 4000 && accepted; ++accepted_bytes) {
    accepted = long_text.AcceptBytes(accepted_bytes % 3 == 2 ? "1" : "+");
  }
  // Each byte doubles the parses: refused within a few dozen bytes.
  EXPECT_FALSE(accepted) << "a text that opens ever more parses is refused";
  EXPECT_LT(accepted_bytes, 64);
  EXPECT_TRUE(long_text.refused_as_ambiguous());
  // Bytes outside a grammar are refused, not for the bound.
  auto lists = CompiledGrammar::Create(NestedLists(), AlphabetVocabulary("[],0a1", 2));
  ASSERT_TRUE(lists.ok()) << lists.status();
  Matcher outside(*lists);
  EXPECT_FALSE(outside.AcceptBytes("]"));
  EXPECT_FALSE(outside.refused_as_ambiguous());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  std::vector<uint32_t> mask((*grammar)->vocabulary().mask_words());
  long_text.FillNextTokenMask(absl::MakeSpan(mask));  // Bounded, and within the set it kept.
}

}  // namespace
}  // namespace pagoda::constraints
