#ifndef PAGODA_SCHEDULER_ENGINE_FINISH_REASON_H_
#define PAGODA_SCHEDULER_ENGINE_FINISH_REASON_H_

// The one mapping from a sequence's final status to the finish reason clients
// see (pagoda.v1's enum and OpenAI's strings). Every front door uses it.

#include <string_view>

#include "pagoda/v1/generation.pb.h"
#include "scheduler/engine/sequence.h"

namespace pagoda::scheduler {

// How a sequence ended, as clients see it: STOP (EOS or a stop token),
// LENGTH (max_tokens or max_model_len), ABORTED (cancelled, failed, or never
// schedulable); UNSPECIFIED while it runs. A stop string is found after the
// engine (api/stop_strings.h) and turns the reason into STOP there.
pagoda::v1::FinishReason ToFinishReason(SequenceStatus status);

// The name OpenAI's API and the metrics give a finish reason: "stop",
// "length" or "abort"; empty for UNSPECIFIED.
std::string_view FinishReasonName(pagoda::v1::FinishReason reason);

// The finished-requests metric's reason (vllm:request_success_total's
// finished_reason and the request records): the client's name, or "error"
// for a request that failed or could never be scheduled.
inline constexpr std::string_view kFinishReasonError = "error";
std::string_view MetricFinishReason(SequenceStatus status);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_FINISH_REASON_H_
