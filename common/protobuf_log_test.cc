#include "common/protobuf_log.h"

#include <string>

#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"

namespace pagoda {
namespace {

// A StringValue whose string holds bytes that are not UTF-8: libprotobuf
// refuses it and logs an ERROR line each time.
const std::string kInvalidUtf8Message("\x0A\x02\xFF\xFE", 4);

TEST(ProtobufLogTest, ParseErrorLinesAreLimitedToOneASecond) {
  LimitProtobufLogging();
  const int64_t before = DroppedProtobufLogLines();
  for (int i = 0; i < 100; ++i) {
    google::protobuf::StringValue value;
    EXPECT_FALSE(value.ParseFromString(kInvalidUtf8Message));
  }
  // At most two lines got through (a second boundary may fall inside).
  EXPECT_GE(DroppedProtobufLogLines() - before, 98);
}

}  // namespace
}  // namespace pagoda
