#include "text/utf8.h"

#include "gtest/gtest.h"

namespace pagoda {
namespace {

TEST(Utf8Test, ValidatesWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("ascii é 中 🙂"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // Overlong.
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // Surrogate.
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // Above U+10FFFF.
  EXPECT_FALSE(IsValidUtf8("\xE4\xB8"));          // Truncated.
  EXPECT_FALSE(IsValidUtf8("\x80"));
}

TEST(Utf8Test, LossyReplacesEachMaximalSubpartOnce) {
  EXPECT_EQ(Utf8Lossy("a\xE4\xB8"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(Utf8Lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x99"), "\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("ok 🙂"), "ok 🙂");
}

TEST(Utf8Test, CompletePrefixHoldsBackOnlyAnUnfinishedCharacter) {
  EXPECT_EQ(CompleteUtf8PrefixLength("ab"), 2u);
  EXPECT_EQ(CompleteUtf8PrefixLength("a\xF0\x9F\x99"), 1u);
  EXPECT_EQ(CompleteUtf8PrefixLength("a\xF0\x9F\x99\x82"), 5u);
  EXPECT_EQ(CompleteUtf8PrefixLength("a\x80"), 2u);  // Invalid, not unfinished.
}

}  // namespace
}  // namespace pagoda
