// The pagoda.v1 gRPC front door: the Generation service and the server
// that carries it (with health, reflection and, beside it, vLLM's engine
// API).
#ifndef PAGODA_SCHEDULER_API_FRONTEND_H_
#define PAGODA_SCHEDULER_API_FRONTEND_H_

// The pagoda.v1 gRPC front door: the Generation service (validation,
// submission to the engine, streaming) and FrontendServer, which serves it
// beside the vLLM engine API and health on one port.

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "pagoda/v1/generation.grpc.pb.h"
#include "scheduler/api/grpc_door.h"
#include "scheduler/api/request_path.h"
#include "scheduler/api/request_reactors.h"
#include "scheduler/api/request_validation.h"
#include "scheduler/engine/engine.h"
#include "text/tokenizer.h"

namespace prometheus {
class Registry;
}

namespace pagoda::scheduler {

// Static facts about the served model, for GetModelInfo.
struct ServedModelInfo {
  std::string model_name;
  int vocab_size = 0;
  int max_model_len = 0;
  int block_size = 0;
  int tensor_parallel_size = 1;
  std::string device;
  std::vector<int32_t> eos_token_ids;
  SamplingDefaults sampling_defaults;  // --generation-config's, in force.
};

// The pagoda.v1.Generation service (gRPC callback API): pagoda.v1's wire
// side of the request path, which authorizes, validates (text prompts on
// its tokenizer pool, not on gRPC's threads) and submits to the engine;
// never blocks a gRPC thread.
// Thread-safe. Does not own its collaborators; they must outlive it.
class GenerationService final : public pagoda::v1::Generation::CallbackService {
 public:
  GenerationService(ServedModelInfo info, RequestPath* path, GenerationOptions options = {});

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const pagoda::v1::GenerateRequest* request,
                                     pagoda::v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<pagoda::v1::GenerateResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const pagoda::v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const pagoda::v1::GetModelInfoRequest* request,
                                         pagoda::v1::ModelInfo* response) override;

  pagoda::v1::ModelInfo ModelInfo() const;

  // Waits until gRPC is done with every Generate call (responses written), or
  // `timeout`; true if none is left. For drain, after the engine is idle.
  bool WaitForCallsToFinish(absl::Duration timeout) { return door_.WaitForCallsToFinish(timeout); }

 private:
  GrpcDoor door_;  // First: the last to go.
  const ServedModelInfo info_;
  Engine* const engine_;
};

// Where and how the client API listens.
struct FrontendOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = the OS picks.
  // Bigger messages are refused (RESOURCE_EXHAUSTED) before they are parsed.
  int64_t max_request_bytes = 4 << 20;
  // PEM files. Certificate and key together turn TLS on; a CA bundle as well
  // makes clients present a certificate it signed (mutual TLS).
  std::string ssl_certfile;
  std::string ssl_keyfile;
  std::string ssl_ca_certs;
  // More services on the same port (vllm.grpc.engine.VllmEngine); they must
  // outlive the server.
  std::vector<grpc::Service*> extra_services;
  // When set, every call is counted and timed here (GrpcRequestMetrics).
  std::shared_ptr<prometheus::Registry> metrics_registry;
};

// A running gRPC server: the Generation service, grpc.health.v1 (overall
// status SERVING while the engine is healthy and accepting) and server
// reflection. Thread-safe.
class FrontendServer {
 public:
  // Binds options.host:port and starts serving. INVALID_ARGUMENT for
  // unreadable or half-given TLS files, UNAVAILABLE if it cannot listen.
  // `service` and `engine` must outlive the server.
  static absl::StatusOr<std::unique_ptr<FrontendServer>> Start(const FrontendOptions& options,
                                                               GenerationService* service,
                                                               Engine* engine);
  ~FrontendServer();  // Shutdown()s.
  FrontendServer(const FrontendServer&) = delete;
  FrontendServer& operator=(const FrontendServer&) = delete;

  int port() const { return port_; }
  // Reports NOT_SERVING from now on (drain).
  void SetDraining();
  // Stops the server: in-progress calls get `deadline` to end. Idempotent.
  void Shutdown(absl::Duration deadline);

 private:
  FrontendServer(std::unique_ptr<grpc::Server> server, int port, Engine* engine);
  // Keeps the health status in step with the engine.
  void WatchHealth();

  std::unique_ptr<grpc::Server> server_;
  const int port_;
  Engine* const engine_;
  absl::Mutex mu_;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread health_watcher_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_FRONTEND_H_
