#ifndef PAGODA_TESTS_SUPPORT_COLLECTING_SINK_H_
#define PAGODA_TESTS_SUPPORT_COLLECTING_SINK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "scheduler/engine/request_sink.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler::testing {

// Collects what the engine delivers for one request, for engine tests: the
// tokens of every sequence in arrival order, the last sequence status, the
// number of deltas and the final status. A second OnFinish fails the test.
// Thread-safe.
class CollectingSink : public RequestSink {
 public:
  void OnDelta(const RequestDelta& delta) override;
  void OnFinish(const absl::Status& status) override;

  // `hook` runs on the engine thread after each delta (outside the sink's
  // lock, so it may call the sink) with the number of tokens so far. Set it
  // before the engine can see the request to catch the first delta.
  void set_on_delta(std::function<void(int num_tokens)> hook);
  // `hook` runs on the engine thread when the final status comes, before
  // WaitFinished returns: where a client that has its final response acts.
  void set_on_finish(std::function<void()> hook);

  // True once OnFinish came, false after `timeout`.
  bool WaitFinished(absl::Duration timeout = absl::Seconds(60));
  std::vector<int32_t> tokens();
  // Each sequence's tokens (with their logprobs) and last status, by index:
  // beam search's and best_of's answers, all in the final delta.
  struct SequenceOutput {
    std::vector<GeneratedToken> tokens;
    SequenceStatus status = SequenceStatus::kWaiting;
  };
  std::map<int, SequenceOutput> sequences();
  absl::Status status();  // UNKNOWN until OnFinish.
  SequenceStatus last_status();
  int num_deltas();

 private:
  absl::Mutex mu_;
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::map<int, SequenceOutput> sequences_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_) = absl::UnknownError("not finished");
  SequenceStatus last_status_ ABSL_GUARDED_BY(mu_) = SequenceStatus::kWaiting;
  int num_deltas_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(int)> on_delta_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_finish_ ABSL_GUARDED_BY(mu_);
  absl::Notification finished_;
};

}  // namespace pagoda::scheduler::testing

#endif  // PAGODA_TESTS_SUPPORT_COLLECTING_SINK_H_
