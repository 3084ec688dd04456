#ifndef PAGODA_COMMON_PROTOBUF_LOG_H_
#define PAGODA_COMMON_PROTOBUF_LOG_H_

// Rate limiting of libprotobuf's log lines, so clients sending malformed
// messages cannot flood the log.

#include <cstdint>

namespace pagoda {

// libprotobuf logs an ERROR line for every message it refuses to parse for
// invalid UTF-8 in a string field, so any client could fill the log at the
// rate it sends such requests. After this call protobuf's log lines go to
// glog at most once a second (FATAL ones always), the next line saying how
// many were dropped in between. Call once, early in main (protobuf's
// SetLogHandler is not thread-safe).
void LimitProtobufLogging();

// Protobuf log lines dropped since LimitProtobufLogging (for tests).
int64_t DroppedProtobufLogLines();

}  // namespace pagoda

#endif  // PAGODA_COMMON_PROTOBUF_LOG_H_
