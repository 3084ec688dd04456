#include "scheduler/api/frontend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "scheduler/api/request_reactors.h"

namespace pagoda::scheduler {

using pagoda::v1::GenerateRequest;
using pagoda::v1::GenerateResponse;

GenerationService::GenerationService(ServedModelInfo info, Engine* engine,
                                     RequestValidator* validator, const Tokenizer* tokenizer)
    : info_(std::move(info)), engine_(engine), validator_(validator), tokenizer_(tokenizer) {}

grpc::ServerUnaryReactor* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                      const GenerateRequest* request,
                                                      GenerateResponse* response) {
  absl::StatusOr<ValidatedRequest> validated = validator_->Validate(*request);
  if (!validated.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(validated.status()));
    return reactor;
  }
  return StartUnaryGenerate(&calls_, engine_, tokenizer_, *std::move(validated), response);
}

grpc::ServerWriteReactor<GenerateResponse>* GenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const GenerateRequest* request) {
  absl::StatusOr<ValidatedRequest> validated = validator_->Validate(*request);
  if (!validated.ok()) return FailedStream(ToGrpcStatus(validated.status()));
  return StartStreamGenerate(&calls_, engine_, tokenizer_, *std::move(validated));
}

pagoda::v1::ModelInfo GenerationService::ModelInfo() const {
  const EngineSnapshot snapshot = engine_->snapshot();
  pagoda::v1::ModelInfo out;
  out.set_model_name(info_.model_name);
  out.set_vocab_size(info_.vocab_size);
  out.set_max_model_len(info_.max_model_len);
  out.set_block_size(info_.block_size);
  out.set_num_gpu_blocks(snapshot.num_gpu_blocks);
  out.set_num_cpu_blocks(snapshot.num_cpu_blocks);
  out.set_free_gpu_blocks(snapshot.free_gpu_blocks);
  out.set_free_cpu_blocks(snapshot.free_cpu_blocks);
  out.set_tensor_parallel_size(info_.tensor_parallel_size);
  out.set_device(info_.device);
  for (int32_t id : info_.eos_token_ids) out.add_eos_token_ids(id);
  out.set_workers_healthy(snapshot.healthy);
  pagoda::v1::EngineStats* stats = out.mutable_engine_stats();
  stats->set_num_steps(snapshot.num_steps);
  stats->set_num_running(snapshot.num_running);
  stats->set_num_waiting(snapshot.num_waiting);
  stats->set_num_swapped(snapshot.num_swapped);
  stats->set_num_in_flight(snapshot.num_in_flight);
  stats->set_num_preemptions_total(snapshot.num_preemptions_total);
  stats->set_prompt_tokens_total(snapshot.prompt_tokens_total);
  stats->set_generation_tokens_total(snapshot.generation_tokens_total);
  stats->set_batched_sequences_total(snapshot.batched_sequences_total);
  stats->set_schedule_seconds_total(snapshot.schedule_seconds_total);
  stats->set_worker_rpc_seconds_total(snapshot.worker_rpc_seconds_total);
  stats->set_forward_seconds_total(snapshot.forward_seconds_total);
  stats->set_postprocess_seconds_total(snapshot.postprocess_seconds_total);
  stats->set_accepting(snapshot.accepting);
  return out;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(
    grpc::CallbackServerContext* context, const pagoda::v1::GetModelInfoRequest* request,
    pagoda::v1::ModelInfo* response) {
  *response = ModelInfo();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

absl::StatusOr<std::unique_ptr<FrontendServer>> FrontendServer::Start(const std::string& host,
                                                                      int port,
                                                                      GenerationService* service,
                                                                      Engine* engine) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string address = absl::StrCat(
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, ":", port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &bound_port);
  // gRPC sets SO_REUSEPORT by default, which lets a second server share a
  // busy port and take half its calls: fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address, " (address in use or not valid)"));
  }
  return std::unique_ptr<FrontendServer>(new FrontendServer(std::move(server), bound_port, engine));
}

FrontendServer::FrontendServer(std::unique_ptr<grpc::Server> server, int port, Engine* engine)
    : server_(std::move(server)), port_(port), engine_(engine) {
  health_watcher_ = std::thread([this] { WatchHealth(); });
}

FrontendServer::~FrontendServer() { Shutdown(absl::ZeroDuration()); }

void FrontendServer::SetDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void FrontendServer::WatchHealth() {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  int last = -1;  // Unknown.
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const bool serving = !draining_ && engine_->healthy();
    if (static_cast<int>(serving) != last && health != nullptr) {
      health->SetServingStatus(serving);
      health->SetServingStatus("pagoda.v1.Generation", serving);
      if (last != -1) LOG(WARNING) << "health: " << (serving ? "SERVING" : "NOT_SERVING");
      last = serving;
    }
    // Wakes early on Shutdown or SetDraining.
    auto changed = [this, serving]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return stopping_ || (draining_ && serving);
    };
    mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(100));
  }
}

void FrontendServer::Shutdown(absl::Duration deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (health_watcher_.joinable()) health_watcher_.join();
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoSeconds(deadline));
}

}  // namespace pagoda::scheduler
