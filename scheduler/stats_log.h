#ifndef PAGODA_SCHEDULER_STATS_LOG_H_
#define PAGODA_SCHEDULER_STATS_LOG_H_

// The server's periodic stats line in the log, as vLLM's LoggingStatLogger
// writes it (vllm/v1/metrics/loggers.py), so that what reads vLLM's logs
// reads Pagoda's:
//   Engine 000: Avg prompt throughput: 123.4 tokens/s, Avg generation
//   throughput: 56.7 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache
//   usage: 12.5%, Prefix cache hit rate: 40.0%
// and, in an interval that drafted, vLLM's SpecDecoding metrics line. Every
// VLLM_LOG_STATS_INTERVAL seconds (10 by default, as vLLM's), off with
// --disable-log-stats. As vLLM's, an interval that moved no token after one
// that moved none is not logged (vLLM logs it at debug level), so an idle
// server's log stays quiet. Unlike vLLM's, the prefix cache hit rate is the
// interval's (vLLM's: its last 1,000 requests').

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {

// The lines for the interval from `before` to `now`, `seconds` long: none
// when neither it nor the interval before it (`previous_active`) moved a
// prompt or generated token.
std::vector<std::string> StatsLogLines(const EngineSnapshot& before, const EngineSnapshot& now,
                                       double seconds, bool previous_active);

// A thread that logs StatsLogLines (glog INFO) every `interval` until
// destroyed. `engine` must outlive it.
class StatsLog {
 public:
  StatsLog(const Engine* engine, absl::Duration interval);
  ~StatsLog();
  StatsLog(const StatsLog&) = delete;
  StatsLog& operator=(const StatsLog&) = delete;

 private:
  void Run();

  const Engine* const engine_;
  const absl::Duration interval_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_STATS_LOG_H_
