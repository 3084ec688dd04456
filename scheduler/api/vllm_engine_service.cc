#include "scheduler/api/vllm_engine_service.h"

#include <memory>
#include <string>
#include <utility>

#include "scheduler/api/engine_stream_call.h"
#include "scheduler/api/grpc_status.h"
#include "scheduler/api/grpc_stream_sink.h"
#include "scheduler/api/request_output.h"

namespace pagoda::scheduler {
namespace {

using vllm_api::GenerateResponse;

// vLLM's messages of a pagoda.v1 stream (VllmOutputConverter). An abort
// (Abort, or the client leaving) ends the sequences still running with
// finish_reason "abort", as vLLM, and the stream with OK.
class VllmMessages {
 public:
  explicit VllmMessages(VllmOutputConverter converter) : converter_(std::move(converter)) {}

  template <typename Push>
  void Convert(const pagoda::v1::GenerateResponse& message, Push push) {
    for (GenerateResponse& out : converter_.Convert(message)) push(std::move(out));
  }
  template <typename Push>
  grpc::Status End(const absl::Status& final_status, Push push) {
    if (!final_status.ok() && !absl::IsCancelled(final_status)) {
      return ToGrpcStatus(final_status);
    }
    for (GenerateResponse& out : converter_.AbortRemaining()) push(std::move(out));
    return grpc::Status::OK;
  }

 private:
  VllmOutputConverter converter_;
};

using VllmStreamState = GrpcStreamSink<GenerateResponse, VllmMessages>;
using VllmStream = EngineStreamCall<GenerateResponse, VllmStreamState>;

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
  auto state = std::make_shared<VllmStreamState>(call, path->MakeOutput(*validated),
                                                 VllmMessages(std::move(converter)), path,
                                                 validated->request_id, max_queued_messages);
  call->Arm(validated->request_id, state);
  absl::Status accepted = path->Submit(*validated, state);
  if (!accepted.ok()) state->OnFinish(accepted);
}

}  // namespace

VllmEngineService::VllmEngineService(ServedModelInfo info, RequestPath* path,
                                     GenerationOptions options)
    : door_(path, options), info_(std::move(info)), engine_(path->engine()) {}

grpc::ServerUnaryReactor* VllmEngineService::Answer(grpc::CallbackServerContext* context,
                                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

grpc::ServerWriteReactor<vllm_api::GenerateResponse>* VllmEngineService::Generate(
    grpc::CallbackServerContext* context, const vllm_api::GenerateRequest* request) {
  last_receive_seconds_ = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  auto* call = new VllmStream(door_.calls(), door_.path());
  if (grpc::Status allowed = door_.Authorize(*context); !allowed.ok()) {
    call->Finish(allowed);
    return call;
  }
  absl::StatusOr<VllmRequestPlan> plan = TranslateVllmRequest(*request, info_.max_model_len);
  if (!plan.ok()) {
    call->Finish(ToGrpcStatus(plan.status()));
    return call;
  }
  const int max_queued = door_.options().max_stream_queued_messages;
  // Token ids are checked inline; only text needs the tokenizer's time.
  const bool needs_tokenizer = !plan->request.prompt().empty();
  absl::Status started =
      door_.path()->RunValidation(needs_tokenizer, door_.pending_validations(),
                                  [path = door_.path(), call, max_queued, plan = *std::move(plan)] {
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
  if (grpc::Status allowed = door_.Authorize(*context); !allowed.ok())
    return Answer(context, allowed);
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
