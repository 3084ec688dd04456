#ifndef PAGODA_SCHEDULER_API_REQUEST_OUTPUT_H_
#define PAGODA_SCHEDULER_API_REQUEST_OUTPUT_H_

// RequestOutput: engine deltas turned into one request's client
// responses (text, stop strings, logprobs), shared by every front door.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/request_detokenizer.h"
#include "scheduler/api/stop_strings.h"
#include "scheduler/engine/finish_reason.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"
#include "text/tokenizer.h"

namespace pagoda::scheduler {


// How a request's text ends, beyond what the engine checks.
struct OutputOptions {
  // Stop strings matched on the detokenized text (needs a tokenizer).
  std::vector<std::string> stop_strings;
  bool include_stop_str_in_output = false;
  // Sequences the request returns (n): the request is over when all are.
  int num_sequences = 1;
  // vLLM's --enable-log-outputs: each sequence's whole text and finish
  // reason logged when it ends (request_log.h), cut to max_log_len.
  bool log_outputs = false;
  int max_log_len = -1;
};

// Builds one request's client responses from engine deltas: the stream
// message of each delta (new tokens and their text only) and the whole
// response accumulated so far. The EOS or stop token id that ends a
// sequence is in its token ids but not its text (as vLLM), unless
// include_stop_str_in_output. A sequence whose text reaches a stop string
// ends there (finish reason STOP, text trimmed); the engine does not know
// stop strings, so once every sequence has ended this way or its own, the
// caller aborts the request in the engine (TakeStopAbort) to free its blocks,
// and reports the abort's CANCELLED as success (FinalStatus).
// Not thread-safe.
class RequestOutput {
 public:
  // `tokenizer` may be null (then no text); it must outlive this object.
  RequestOutput(std::string request_id, int prompt_token_count, const Tokenizer* tokenizer,
                OutputOptions options = {});

  // Accumulates `delta` and returns its stream message.
  pagoda::v1::GenerateResponse AddDelta(const RequestDelta& delta);
  // Accumulates `delta` only, for a caller that answers once with whole():
  // it runs on the engine thread for every request every step, so it
  // builds no message that would be thrown away.
  void AccumulateDelta(const RequestDelta& delta);
  // Everything so far: all tokens and all text of every sequence.
  const pagoda::v1::GenerateResponse& whole() const { return whole_; }

  // True once, after the delta that ended the last running sequence by a
  // stop string while the engine still runs the request: abort it now.
  bool TakeStopAbort();
  // The request's final status given the engine's: the CANCELLED of an
  // abort that TakeStopAbort asked for is success.
  absl::Status FinalStatus(const absl::Status& engine_status) const;

 private:
  struct SequenceState {
    RequestDetokenizer detokenizer;
    StopStringMatcher stop_matcher;
    bool finished = false;
  };
  pagoda::v1::SequenceOutput* WholeSequence(int index);
  // Adds `delta` to the whole response and to `message` unless it is null.
  void Accumulate(const RequestDelta& delta, pagoda::v1::GenerateResponse* message);
  // Adds one sequence's delta to the whole response and to `out` unless
  // it is null.
  void AddSequenceDelta(const RequestDelta::SeqDelta& seq, pagoda::v1::SequenceOutput* out);

  const Tokenizer* tokenizer_;
  const OutputOptions options_;
  pagoda::v1::GenerateResponse whole_;
  std::vector<SequenceState> sequences_;  // By sequence index.
  int num_finished_ = 0;
  bool stopped_by_string_ = false;
  bool stop_abort_state_ = false;  // TakeStopAbort has answered true.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_OUTPUT_H_
