#include "scheduler/api/vllm_engine_service.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/api/api_key.h"
#include "scheduler/api/engine_stream_call.h"
#include "scheduler/api/grpc_status.h"
#include "scheduler/api/request_output.h"
#include "scheduler/api/stream_write_queue.h"

namespace pagoda::scheduler {
namespace {

using vllm_api::GenerateResponse;

// The part of a Generate call the engine holds (as request_reactors.cc's
// StreamState, with vLLM's messages): engine deltas become converter
// messages, written one at a time; every gRPC action is decided under mu_
// and made outside it.
class VllmStreamState : public RequestSink {
 public:
  VllmStreamState(grpc::ServerWriteReactor<GenerateResponse>* call, RequestOutput output,
                  VllmOutputConverter converter, RequestPath* path, std::string request_id,
                  int max_queued_messages)
      : call_(call),
        output_(std::move(output)),
        converter_(std::move(converter)),
        path_(path),
        request_id_(std::move(request_id)),
        writes_(max_queued_messages) {}

  void OnDelta(const RequestDelta& delta) override;
  void OnFinish(const absl::Status& status) override;
  void WriteDone(bool ok);

 private:
  using Writes = StreamWriteQueue<GenerateResponse>;

  absl::Mutex mu_;
  grpc::ServerWriteReactor<GenerateResponse>* const call_;
  RequestOutput output_ ABSL_GUARDED_BY(mu_);
  VllmOutputConverter converter_ ABSL_GUARDED_BY(mu_);
  RequestPath* const path_;
  const std::string request_id_;
  Writes writes_ ABSL_GUARDED_BY(mu_);  // Perform runs outside mu_.
};

using VllmStream = EngineStreamCall<GenerateResponse, VllmStreamState>;

void VllmStreamState::OnDelta(const RequestDelta& delta) {
  Writes::Step step;
  bool overflow = false;
  bool stop_abort = false;
  {
    absl::MutexLock lock(&mu_);
    if (writes_.ending()) return;
    for (GenerateResponse& message : converter_.Convert(output_.AddDelta(delta))) {
      overflow |= !writes_.Push(std::move(message));
    }
    stop_abort = output_.TakeStopAbort();
    step = writes_.Next();
  }
  // Stop strings ended every sequence (the engine records "stop", as the
  // client saw), or the client stopped reading (an abort).
  if (overflow || stop_abort) {
    path_->EndEarly(request_id_, this, overflow ? EarlyEnd::kClientGone : EarlyEnd::kStopStrings);
  }
  writes_.Perform(step, call_, &mu_);
}

void VllmStreamState::OnFinish(const absl::Status& status) {
  Writes::Step step;
  {
    absl::MutexLock lock(&mu_);
    if (!writes_.has_final_status()) {
      const absl::Status final_status = output_.FinalStatus(status);
      if (final_status.ok() || absl::IsCancelled(final_status)) {
        // An abort (Abort, or the client leaving) ends the sequences still
        // running with finish_reason "abort", as vLLM.
        for (GenerateResponse& message : converter_.AbortRemaining()) {
          writes_.Push(std::move(message));
        }
        writes_.SetFinalStatus(grpc::Status::OK);
      } else {
        writes_.SetFinalStatus(ToGrpcStatus(final_status));
      }
    }
    step = writes_.Next();
  }
  writes_.Perform(step, call_, &mu_);
}

void VllmStreamState::WriteDone(bool ok) {
  Writes::Step step;
  {
    absl::MutexLock lock(&mu_);
    writes_.WriteDone(ok);
    step = writes_.Next();
  }
  writes_.Perform(step, call_, &mu_);
}

// Validates the translated request and hands it to the engine, or ends the
// call with the error. After Submit the engine may end the call at any
// moment: nothing touches it after that.
void Submit(VllmStream* call, RequestPath* path, const VllmRequestPlan& plan,
            int max_queued_messages) {
  absl::StatusOr<ValidatedRequest> validated = path->Validate(plan.request);
  if (!validated.ok()) {
    call->Finish(ToGrpcStatus(validated.status()));
    return;
  }
  VllmOutputConverter converter(plan, static_cast<int>(validated->prompt_token_ids.size()),
                                validated->sampling.n);
  auto state =
      std::make_shared<VllmStreamState>(call, path->MakeOutput(*validated), std::move(converter),
                                        path, validated->request_id, max_queued_messages);
  call->Arm(validated->request_id, state);
  absl::Status accepted = path->Submit(*validated, state);
  if (!accepted.ok()) state->OnFinish(accepted);
}

}  // namespace

VllmEngineService::VllmEngineService(ServedModelInfo info, RequestPath* path,
                                     GenerationOptions options)
    : info_(std::move(info)), options_(options), path_(path), engine_(path->engine()) {}

VllmEngineService::~VllmEngineService() {
  pending_validations_.WaitUntilIdle(absl::InfiniteDuration());
}

grpc::Status VllmEngineService::Authorize(const grpc::CallbackServerContext& context) const {
  return CheckApiKey(context, path_->api_key());
}

grpc::ServerUnaryReactor* VllmEngineService::Answer(grpc::CallbackServerContext* context,
                                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<vllm_api::GenerateResponse>* VllmEngineService::Generate(
    grpc::CallbackServerContext* context, const vllm_api::GenerateRequest* request) {
  last_receive_seconds_ = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  auto* call = new VllmStream(&calls_, path_);
  if (grpc::Status allowed = Authorize(*context); !allowed.ok()) {
    call->Finish(allowed);
    return call;
  }
  absl::StatusOr<VllmRequestPlan> plan = TranslateVllmRequest(*request, info_.max_model_len);
  if (!plan.ok()) {
    call->Finish(ToGrpcStatus(plan.status()));
    return call;
  }
  const int max_queued = options_.max_stream_queued_messages;
  // Token ids are checked inline; only text needs the tokenizer's time.
  const bool needs_tokenizer = !plan->request.prompt().empty();
  absl::Status started =
      path_->RunValidation(needs_tokenizer, &pending_validations_,
                           [path = path_, call, max_queued, plan = *std::move(plan)] {
                             Submit(call, path, plan, max_queued);
                           });
  if (!started.ok()) call->Finish(ToGrpcStatus(started));
  return call;
}

grpc::ServerUnaryReactor* VllmEngineService::HealthCheck(grpc::CallbackServerContext* context,
                                                         const vllm_api::HealthCheckRequest*,
                                                         vllm_api::HealthCheckResponse* response) {
  const EngineSnapshot snapshot = engine_->snapshot();
  response->set_healthy(snapshot.healthy && snapshot.accepting);
  if (!snapshot.healthy) {
    response->set_message(engine_->failure_reason());
  } else if (!snapshot.accepting) {
    response->set_message("draining");
  } else {
    response->set_message("serving");
  }
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* VllmEngineService::Abort(grpc::CallbackServerContext* context,
                                                   const vllm_api::AbortRequest* request,
                                                   vllm_api::AbortResponse*) {
  if (grpc::Status allowed = Authorize(*context); !allowed.ok()) return Answer(context, allowed);
  for (const std::string& id : request->request_ids()) engine_->AbortRequest(id);
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* VllmEngineService::GetModelInfo(
    grpc::CallbackServerContext* context, const vllm_api::GetModelInfoRequest*,
    vllm_api::GetModelInfoResponse* response) {
  response->set_model_path(info_.model_name);
  response->set_is_generation(true);
  response->set_max_context_length(static_cast<uint32_t>(info_.max_model_len));
  response->set_vocab_size(static_cast<uint32_t>(info_.vocab_size));
  response->set_supports_vision(false);
  return Answer(context, grpc::Status::OK);
}

grpc::ServerUnaryReactor* VllmEngineService::GetServerInfo(
    grpc::CallbackServerContext* context, const vllm_api::GetServerInfoRequest*,
    vllm_api::GetServerInfoResponse* response) {
  const EngineSnapshot snapshot = engine_->snapshot();
  response->set_active_requests(static_cast<uint32_t>(snapshot.num_in_flight));
  response->set_is_paused(!snapshot.accepting);
  response->set_last_receive_timestamp(last_receive_seconds_.load());
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - start_time_));
  response->set_server_type("vllm-grpc");
  return Answer(context, grpc::Status::OK);
}

}  // namespace pagoda::scheduler
