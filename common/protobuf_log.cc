#include "common/protobuf_log.h"

#include <atomic>
#include <string>

#include "absl/time/clock.h"
#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace pagoda {
namespace {

std::atomic<int64_t> last_line_ns{0};
std::atomic<int64_t> dropped_since_last{0};
std::atomic<int64_t> dropped_total{0};

void RateLimitedHandler(google::protobuf::LogLevel level, const char* filename, int line,
                        const std::string& message) {
  if (level == google::protobuf::LOGLEVEL_FATAL) {
    LOG(ERROR) << "libprotobuf FATAL " << filename << ":" << line << "] " << message;
    return;
  }
  const int64_t now_ns = absl::GetCurrentTimeNanos();
  int64_t last_ns = last_line_ns.load();
  if (now_ns - last_ns < absl::ToInt64Nanoseconds(absl::Seconds(1)) ||
      !last_line_ns.compare_exchange_strong(last_ns, now_ns)) {
    dropped_since_last.fetch_add(1);
    dropped_total.fetch_add(1);
    return;
  }
  const int64_t dropped = dropped_since_last.exchange(0);
  LOG(WARNING) << "libprotobuf " << filename << ":" << line << "] " << message
               << (dropped > 0 ? " (" + std::to_string(dropped) + " more lines dropped before it)"
                               : "");
}

}  // namespace

void LimitProtobufLogging() { google::protobuf::SetLogHandler(&RateLimitedHandler); }

int64_t DroppedProtobufLogLines() { return dropped_total.load(); }

}  // namespace pagoda
