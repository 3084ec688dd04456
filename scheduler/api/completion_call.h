// One OpenAI completion on the request path: its engine requests (one per
// prompt), their deltas turned into OpenAI's JSON or SSE, and the answer.
#ifndef PAGODA_SCHEDULER_API_COMPLETION_CALL_H_
#define PAGODA_SCHEDULER_API_COMPLETION_CALL_H_

#include <memory>
#include <string>
#include <vector>

#include "scheduler/api/call_tracker.h"
#include "scheduler/api/http_exchange.h"
#include "scheduler/api/openai_protocol.h"
#include "scheduler/api/request_path.h"
#include "scheduler/api/request_validation.h"

namespace pagoda::scheduler {

// A parsed and validated completion (OpenAiRoutes::Prepare).
struct PreparedCompletion {
  OpenAiRequest request;
  std::vector<ValidatedRequest> validated;  // One per prompt.
  std::vector<std::string> echo;            // Per prompt, when request.echo.
};

// Submits every prompt of `prepared` on `path` and answers on `exchange`
// (attached to it, so that a client that leaves aborts the requests): a
// JSON response, or an SSE stream, named `model`. Counted in `calls` until
// the call is gone. Call on the exchange's executor.
void StartCompletionCall(RequestPath* path, std::string model, PreparedCompletion prepared,
                         std::shared_ptr<HttpExchange> exchange, CallTracker* calls);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_COMPLETION_CALL_H_
