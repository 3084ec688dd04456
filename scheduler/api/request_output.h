#ifndef PAGODA_SCHEDULER_API_REQUEST_OUTPUT_H_
#define PAGODA_SCHEDULER_API_REQUEST_OUTPUT_H_

#include <string>
#include <vector>

#include "common/tokenizer.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/request_detokenizer.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {

pagoda::v1::FinishReason ToFinishReason(SequenceStatus status);

// Builds one request's client responses from engine deltas: the stream
// message of each delta (new tokens and their text only) and the whole
// response accumulated so far. Not thread-safe.
class RequestOutput {
 public:
  // `tokenizer` may be null (then no text); it must outlive this object.
  RequestOutput(std::string request_id, int prompt_token_count, const Tokenizer* tokenizer);

  // Accumulates `delta` and returns its stream message.
  pagoda::v1::GenerateResponse AddDelta(const RequestDelta& delta);
  // Everything so far: all tokens and all text of every sequence.
  const pagoda::v1::GenerateResponse& whole() const { return whole_; }

 private:
  pagoda::v1::SequenceOutput* WholeSequence(int index);

  const Tokenizer* tokenizer_;
  pagoda::v1::GenerateResponse whole_;
  std::vector<RequestDetokenizer> detokenizers_;  // By sequence index.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_OUTPUT_H_
