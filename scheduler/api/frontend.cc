#include "scheduler/api/frontend.h"

#include <malloc.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/tls_credentials.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "scheduler/api/grpc_request_metrics.h"
#include "scheduler/api/request_reactors.h"

namespace pagoda::scheduler {

using pagoda::v1::GenerateRequest;
using pagoda::v1::GenerateResponse;

GenerationService::GenerationService(ServedModelInfo info, RequestPath* path,
                                     GenerationOptions options)
    : door_(path, options), info_(std::move(info)), engine_(path->engine()) {}

grpc::ServerUnaryReactor* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                      const GenerateRequest* request,
                                                      GenerateResponse* response) {
  if (grpc::Status allowed = door_.Authorize(*context); !allowed.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(allowed);
    return reactor;
  }
  return StartUnaryGenerate(door_.calls(), door_.pending_validations(), door_.path(), request,
                            response);
}

grpc::ServerWriteReactor<GenerateResponse>* GenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const GenerateRequest* request) {
  if (grpc::Status allowed = door_.Authorize(*context); !allowed.ok()) return FailedStream(allowed);
  return StartStreamGenerate(door_.calls(), door_.pending_validations(), door_.path(), request,
                             door_.options().max_stream_queued_messages);
}

namespace {

// The defaults as SamplingParams' optional fields: set = in force.
void SetSamplingDefaults(const SamplingDefaults& defaults, pagoda::v1::SamplingParams* out) {
  if (defaults.temperature) out->set_temperature(*defaults.temperature);
  if (defaults.top_k) out->set_top_k(*defaults.top_k);
  if (defaults.top_p) out->set_top_p(*defaults.top_p);
  if (defaults.min_p) out->set_min_p(*defaults.min_p);
  if (defaults.repetition_penalty) out->set_repetition_penalty(*defaults.repetition_penalty);
}

}  // namespace

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
  SetSamplingDefaults(info_.sampling_defaults, out.mutable_sampling_defaults());
  out.set_workers_healthy(snapshot.healthy);
  if (!snapshot.healthy) out.set_workers_status(engine_->failure_reason());
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
  stats->set_schedule_seconds_total(snapshot.seconds_total.schedule);
  stats->set_worker_rpc_seconds_total(snapshot.seconds_total.worker_rpc);
  stats->set_forward_seconds_total(snapshot.seconds_total.forward);
  stats->set_all_reduce_seconds_total(snapshot.seconds_total.all_reduce);
  stats->set_mask_wait_seconds_total(snapshot.seconds_total.mask_wait);
  stats->set_postprocess_seconds_total(snapshot.seconds_total.postprocess);
  stats->set_engine_cpu_seconds_total(snapshot.seconds_total.engine_cpu);
  stats->set_accepting(snapshot.accepting);
  return out;
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(
    grpc::CallbackServerContext* context, const pagoda::v1::GetModelInfoRequest* request,
    pagoda::v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  grpc::Status allowed = door_.Authorize(*context);
  if (allowed.ok()) *response = ModelInfo();
  reactor->Finish(allowed);
  return reactor;
}

namespace {

constexpr absl::Duration kMemoryTrimPeriod = absl::Seconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<FrontendServer>> FrontendServer::Start(
    const FrontendOptions& options, GenerationService* service, Engine* engine) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(
      TlsFiles{options.ssl_certfile, options.ssl_keyfile, options.ssl_ca_certs});
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string& host = options.host;
  const std::string address = absl::StrCat(
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, ":", options.port);
  builder.AddListeningPort(address, *credentials, &bound_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<int64_t>(options.max_request_bytes, std::numeric_limits<int>::max())));
  // gRPC sets SO_REUSEPORT by default, which lets a second server share a
  // busy port and take half its calls: fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service);
  for (grpc::Service* extra : options.extra_services) builder.RegisterService(extra);
  if (options.metrics_registry != nullptr) {
    GrpcRequestMetrics(options.metrics_registry).Attach(builder);
  }
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
  absl::Time last_trim = absl::Now();
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    // A burst of big messages (refused ones too: gRPC buffers a message
    // before it checks its size) leaves freed memory in malloc's arenas;
    // hand it back so the server's footprint returns to its idle size.
    if (absl::Now() - last_trim >= kMemoryTrimPeriod) {
      malloc_trim(0);
      last_trim = absl::Now();
    }
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
