#include "scheduler/api/json_body.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

std::string Nested(int levels) {
  return std::string(levels, '[') + "1" + std::string(levels, ']');
}

TEST(JsonBodyTest, BodiesNestedPastTheBoundAreRefusedWithoutRecursing) {
  EXPECT_TRUE(ParseJsonBody(Nested(kMaxJsonDepth)).ok());
  EXPECT_TRUE(ParseOrderedJsonBody(R"({"a": )" + Nested(kMaxJsonDepth - 1) + "}").ok());
  // A million levels: nlohmann's parser is iterative, and what it drops is
  // never built, so nothing recurses over it (copying it would).
  for (int levels : {kMaxJsonDepth + 1, 1'000'000}) {
    absl::StatusOr<nlohmann::json> refused = ParseJsonBody(Nested(levels));
    ASSERT_FALSE(refused.ok()) << levels;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(refused.status().message(), "nested deeper than 64"))
        << refused.status();
    EXPECT_FALSE(ParseOrderedJsonBody(R"({"tools": )" + Nested(levels) + "}").ok());
    EXPECT_TRUE(ParseOrderedJsonOrDiscarded(Nested(levels)).is_discarded());
  }
  absl::StatusOr<nlohmann::json> broken = ParseJsonBody("{\"a\": ");
  EXPECT_EQ(broken.status().message(), "body: not valid JSON (UTF-8)");
  EXPECT_TRUE(ParseOrderedJsonOrDiscarded("{\"a\": ").is_discarded());
  EXPECT_EQ(ParseOrderedJsonOrDiscarded(R"({"b": 1, "a": [2]})").dump(), R"({"b":1,"a":[2]})");
}

}  // namespace
}  // namespace pagoda::scheduler
