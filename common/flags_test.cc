#include "common/flags.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, max_num_seqs, 1, "test flag");
ABSL_FLAG(bool, enable_prefix_caching, false, "test flag");

namespace pagoda {
namespace {

std::vector<std::string> Rewrite(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  AcceptDashedFlagNames(static_cast<int>(argv.size()), argv.data());
  // As a C string: a rewrite may shorten an argument in place.
  for (std::string& arg : args) arg.resize(std::strlen(arg.c_str()));
  return args;
}

TEST(AcceptDashedFlagNamesTest, RewritesRegisteredFlagNamesOnly) {
  EXPECT_EQ(Rewrite({"prog", "--max-num-seqs=4", "-max-num-seqs", "7"}),
            (std::vector<std::string>{"prog", "--max_num_seqs=4", "-max_num_seqs", "7"}));
  // Unknown names and values keep their dashes; so does the value part.
  EXPECT_EQ(Rewrite({"prog", "--not-a-flag", "--max-num-seqs", "-1", "--max-num-seqs=a-b"}),
            (std::vector<std::string>{"prog", "--not-a-flag", "--max_num_seqs", "-1",
                                      "--max_num_seqs=a-b"}));
}

TEST(AcceptDashedFlagNamesTest, NegatedBoolAndDoubleDashTerminator) {
  EXPECT_EQ(
      Rewrite({"prog", "--noenable-prefix-caching", "--", "--max-num-seqs"}),
      (std::vector<std::string>{"prog", "--noenable_prefix_caching", "--", "--max-num-seqs"}));
}

TEST(AcceptDashedFlagNamesTest, VllmNegationOfBoolFlagsOnly) {
  EXPECT_EQ(
      Rewrite({"prog", "--no-enable-prefix-caching", "-no-enable-prefix-caching"}),
      (std::vector<std::string>{"prog", "--noenable_prefix_caching", "-noenable_prefix_caching"}));
  // Not a bool flag, or no flag at all: left for Abseil to refuse.
  EXPECT_EQ(Rewrite({"prog", "--no-max-num-seqs", "--no-such-flag"}),
            (std::vector<std::string>{"prog", "--no-max-num-seqs", "--no-such-flag"}));
}

TEST(ExpandFlagAliasesTest, SpellsVllmsShortFormsOut) {
  const std::vector<std::pair<std::string, std::string>> aliases = {{"tp", "tensor_parallel_size"},
                                                                    {"q", "quantization"}};
  EXPECT_EQ(
      ExpandFlagAliases({"prog", "-tp", "2", "-q=fp8", "-tpx", "--tp", "-tp", "--", "-q"}, aliases),
      (std::vector<std::string>{"prog", "--tensor_parallel_size", "2", "--quantization=fp8", "-tpx",
                                "--tp", "--tensor_parallel_size", "--", "-q"}));
}

TEST(JoinListFlagWordsTest, TakesTheWordsUpToTheNextFlag) {
  const std::vector<std::string> list = {"lora_modules"};
  EXPECT_EQ(JoinListFlagWords({"prog", "--lora-modules", "a=/x", "b=/y", "--port", "0", "m"}, list),
            (std::vector<std::string>{"prog", "--lora_modules=a=/x b=/y", "--port", "0", "m"}));
  // One word, the "=" form (which takes its own value only), no word, and
  // the words after "--" are left as they are.
  EXPECT_EQ(JoinListFlagWords({"prog", "-lora_modules", "a=/x", "--lora-modules=b=/y", "c=/z",
                               "--lora-modules", "--", "--lora-modules", "d=/w"},
                              list),
            (std::vector<std::string>{"prog", "--lora_modules=a=/x", "--lora-modules=b=/y", "c=/z",
                                      "--lora-modules", "--", "--lora-modules", "d=/w"}));
}

// vLLM's human_readable_int for --max-model-len and --max-num-batched-tokens.
TEST(ExpandHumanReadableIntsTest, SpellsSuffixedValuesAsIntegers) {
  const std::vector<std::string> flags = {"max_model_len", "max_num_batched_tokens"};
  EXPECT_EQ(
      ExpandHumanReadableInts({"p", "--max-model-len", "32k", "--max_num_batched_tokens=1K",
                               "--seed", "2k", "-max-model-len=25.6k"},
                              flags),
      std::vector<std::string>({"p", "--max-model-len", "32000", "--max_num_batched_tokens=1024",
                                "--seed", "2k", "-max-model-len=25600"}));
  // Plain numbers, other text and what follows "--" stay as they are.
  EXPECT_EQ(ExpandHumanReadableInts({"p", "--max-model-len", "4096", "--max-model-len=auto", "--",
                                     "--max-model-len", "1k"},
                                    flags),
            std::vector<std::string>({"p", "--max-model-len", "4096", "--max-model-len=auto", "--",
                                      "--max-model-len", "1k"}));
  EXPECT_EQ(ExpandHumanReadableInts({"p", "--max-model-len"}, flags),
            std::vector<std::string>({"p", "--max-model-len"}));
}

TEST(HelpTextTest, PrintsGroupsInOrderThenTheRest) {
  const std::string help =
      HelpText({"prog", "prog [flags]", {{"Scheduling", {"max_num_seqs"}}, {"Empty", {}}}});
  const size_t group = help.find("\nScheduling:\n  --max-num-seqs");
  const size_t other = help.find("\nOther flags:\n  --enable-prefix-caching");
  ASSERT_NE(group, std::string::npos) << help;
  ASSERT_NE(other, std::string::npos) << help;
  EXPECT_LT(group, other);
  EXPECT_EQ(help.find("--max-num-seqs", help.find("--max-num-seqs") + 1), std::string::npos);
  EXPECT_NE(help.find("\nThis program:\n  -h, --help"), std::string::npos);
}

TEST(HelpTextTest, ListsProgramFlagsByDashedNameOnly) {
  const std::string help = HelpText({"prog", "prog [flags]"});
  EXPECT_EQ(help.rfind("usage: prog [flags]\n", 0), 0u);
  EXPECT_NE(help.find("--max-num-seqs  test flag (default: 1)"), std::string::npos);
  EXPECT_NE(help.find("--enable-prefix-caching"), std::string::npos);
  EXPECT_EQ(help.find("max_num_seqs"), std::string::npos);
  EXPECT_EQ(help.find("--flagfile"), std::string::npos);  // Abseil's own.
  // A short spelling is named in its flag's line.
  ProgramInfo with_alias = {"prog", "prog [flags]"};
  with_alias.aliases = {{"n", "max_num_seqs"}};
  EXPECT_NE(HelpText(with_alias).find("--max-num-seqs  test flag Short: -n. (default: 1)"),
            std::string::npos);
}

TEST(VersionLineTest, NamesVersionAndBuildType) {
  EXPECT_EQ(VersionLine("prog"),
            absl::StrCat("prog ", PAGODA_TEST_VERSION, " (", PAGODA_TEST_BUILD_TYPE, " build)"));
}

TEST(ParsePositiveIntListTest, ReadsListsAndRefusesBadEntries) {
  EXPECT_EQ(ParsePositiveIntList("1,8,32"), (std::vector<int>{1, 8, 32}));
  EXPECT_EQ(ParsePositiveIntList("7"), (std::vector<int>{7}));
  EXPECT_EQ(ParsePositiveIntList("1, 8"), (std::vector<int>{1, 8}));  // Spaces around entries.
  for (const char* bad : {"", "1,,8", "1,8,", "0", "4,-2", "8x", "1 8", "99999999999"}) {
    EXPECT_FALSE(ParsePositiveIntList(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace pagoda
