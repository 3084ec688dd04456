// pagoda.v1's Generate and GenerateStream calls as gRPC callback reactors:
// the wire side of the one request path (request_path.h) for pagoda.v1.
#ifndef PAGODA_SCHEDULER_API_REQUEST_REACTORS_H_
#define PAGODA_SCHEDULER_API_REQUEST_REACTORS_H_

#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.pb.h"
#include "scheduler/api/call_tracker.h"
#include "scheduler/api/grpc_status.h"
#include "scheduler/api/request_path.h"

namespace pagoda::scheduler {

// Starts one Generate call of `request` on `path`: validates it (a text
// prompt on the tokenizer pool, counted in `pending` until done; a full
// pool is RESOURCE_EXHAUSTED), submits it to the engine and answers the
// whole result when the engine finishes it, or the validation's or engine's
// error. A client cancel aborts the request in the engine. Owns itself:
// deletes itself when gRPC is done with it. `calls`, `pending`, `path` and
// `request` must outlive the call, which is counted in `calls` until then.
grpc::ServerUnaryReactor* StartUnaryGenerate(CallTracker* calls, CallTracker* pending,
                                             RequestPath* path,
                                             const pagoda::v1::GenerateRequest* request,
                                             pagoda::v1::GenerateResponse* response);

// Starts one GenerateStream call, validated like StartUnaryGenerate: one
// message per engine delta, one write in flight at a time, later deltas
// queued in the reactor; the stream ends with the engine's final status.
// Client cancel or a failed write aborts the request in the engine (its
// blocks are freed at the next step). A client that stops reading while more
// than `max_queued_messages` messages wait gets the stream ended with
// RESOURCE_EXHAUSTED and its request aborted, so memory per stream stays
// bounded. Owns itself; counted in `calls` like a unary call.
grpc::ServerWriteReactor<pagoda::v1::GenerateResponse>* StartStreamGenerate(
    CallTracker* calls, CallTracker* pending, RequestPath* path,
    const pagoda::v1::GenerateRequest* request, int max_queued_messages);

// A call that fails at once (validation error, refused by the engine).
grpc::ServerWriteReactor<pagoda::v1::GenerateResponse>* FailedStream(const grpc::Status& status);

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_REQUEST_REACTORS_H_
