// vLLM's engine gRPC front door (vllm.grpc.engine.VllmEngine): its wire
// side of the one request path.
#ifndef PAGODA_SCHEDULER_API_VLLM_ENGINE_SERVICE_H_
#define PAGODA_SCHEDULER_API_VLLM_ENGINE_SERVICE_H_

// VllmEngineService: vLLM's engine gRPC API (vllm.grpc.engine.VllmEngine)
// served on the server's gRPC port through the same validator and engine.

#include <atomic>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "scheduler/api/call_tracker.h"
#include "scheduler/api/frontend.h"
#include "scheduler/api/request_path.h"
#include "scheduler/api/vllm_engine_convert.h"
#include "vllm/grpc/engine/vllm_engine.grpc.pb.h"

namespace pagoda::scheduler {

// vllm.grpc.engine.VllmEngine, served beside pagoda.v1 on the same port and
// run by the same request path (docs/api.md). Generate translates the
// request (TranslateVllmRequest), validates it as pagoda.v1 and streams
// VllmOutputConverter's messages; a client cancel or a failed write aborts
// the request in the engine, and an Abort call ends its sequences with
// finish_reason "abort". The API key and the bound on queued stream messages
// are pagoda.v1's (RequestPathOptions, GenerationOptions). Thread-safe; its collaborators must
// outlive it.
class VllmEngineService final : public vllm_api::VllmEngine::CallbackService {
 public:
  VllmEngineService(ServedModelInfo info, RequestPath* path, GenerationOptions options);

  grpc::ServerWriteReactor<vllm_api::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const vllm_api::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* context,
                                        const vllm_api::HealthCheckRequest* request,
                                        vllm_api::HealthCheckResponse* response) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const vllm_api::AbortRequest* request,
                                  vllm_api::AbortResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const vllm_api::GetModelInfoRequest* request,
                                         vllm_api::GetModelInfoResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const vllm_api::GetServerInfoRequest* request,
                                          vllm_api::GetServerInfoResponse* response) override;

  // As GenerationService::WaitForCallsToFinish.
  bool WaitForCallsToFinish(absl::Duration timeout) { return door_.WaitForCallsToFinish(timeout); }

 private:
  grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const grpc::Status& status);

  GrpcDoor door_;  // First: the last to go.
  const ServedModelInfo info_;
  Engine* const engine_;
  const absl::Time start_time_ = absl::Now();
  std::atomic<double> last_receive_seconds_{0};  // Unix time of the last Generate.
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_VLLM_ENGINE_SERVICE_H_
