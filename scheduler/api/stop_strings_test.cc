#include "scheduler/api/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

// Feeds `pieces` and returns everything shown (with the final Flush unless
// a stop string was found).
std::string FeedAll(StopStringMatcher& matcher, const std::vector<std::string>& pieces) {
  std::string shown;
  for (const std::string& piece : pieces) shown += matcher.Append(piece);
  if (!matcher.stopped()) shown += matcher.Flush();
  return shown;
}

TEST(StopStringMatcherTest, EndsBeforeAStopStringSplitAcrossPieces) {
  StopStringMatcher matcher({"STOP"}, false);
  EXPECT_EQ(matcher.Append("abc S"), "ab");  // "c S" might start "STOP".
  EXPECT_EQ(matcher.Append("TO"), "c ");
  EXPECT_EQ(matcher.Append("P and more"), "");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.Append("later"), "");
}

TEST(StopStringMatcherTest, EarliestOfSeveralWinsAndCanBeKept) {
  StopStringMatcher dropped({"world", "lo"}, false);
  EXPECT_EQ(FeedAll(dropped, {"hello world"}), "hel");
  StopStringMatcher kept({"world", "lo"}, true);
  EXPECT_EQ(FeedAll(kept, {"hello world"}), "hello");
}

TEST(StopStringMatcherTest, WithoutAMatchEverythingIsShownByTheEnd) {
  StopStringMatcher matcher({"zzz"}, false);
  EXPECT_EQ(FeedAll(matcher, {"a", "z", "zy", "b"}), "azzyb");
  EXPECT_FALSE(matcher.stopped());
  StopStringMatcher none({}, false);
  EXPECT_EQ(none.Append("as is"), "as is");
}

TEST(StopStringMatcherTest, HoldBackNeverSplitsACharacter) {
  StopStringMatcher matcher({"xyz"}, false);
  // "é" is two bytes; holding back 2 bytes of "aé" must hold the whole "é".
  const std::string shown = matcher.Append("a\xC3\xA9");
  EXPECT_EQ(shown, "a");
  EXPECT_EQ(matcher.Flush(), "\xC3\xA9");
}

TEST(CheckStopStringsTest, BoundsAndNeedsATokenizer) {
  EXPECT_TRUE(CheckStopStrings({}, false, "stop").ok());
  EXPECT_TRUE(CheckStopStrings({"a", "b"}, true, "stop").ok());
  EXPECT_FALSE(CheckStopStrings({"a"}, false, "stop").ok());
  EXPECT_FALSE(CheckStopStrings({""}, true, "stop").ok());
  EXPECT_FALSE(CheckStopStrings({std::string(kMaxStopStringBytes + 1, 'a')}, true, "stop").ok());
  EXPECT_FALSE(
      CheckStopStrings(std::vector<std::string>(kMaxStopStrings + 1, "a"), true, "stop").ok());
  const absl::Status bad = CheckStopStrings({"ok", "\xFF"}, true, "stop");
  EXPECT_NE(bad.message().find("stop[1]"), std::string::npos) << bad;
}

}  // namespace
}  // namespace pagoda::scheduler
