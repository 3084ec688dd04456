#include "worker/worker_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "wire/worker_owner.h"
#include "wire/worker_secret.h"
#include "worker/step_execution.h"

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;

// The canonical codes are shared by Abseil and gRPC; these pin the assumption
// that lets ToGrpcStatus convert by number.
static_assert(static_cast<int>(absl::StatusCode::kInvalidArgument) ==
              static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
static_assert(static_cast<int>(absl::StatusCode::kUnavailable) ==
              static_cast<int>(grpc::StatusCode::UNAVAILABLE));
static_assert(static_cast<int>(absl::StatusCode::kUnauthenticated) ==
              static_cast<int>(grpc::StatusCode::UNAUTHENTICATED));

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  const bool known = code > 0 && code <= static_cast<int>(grpc::StatusCode::UNAUTHENTICATED);
  return grpc::Status(known ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN,
                      std::string(status.message()));
}

WorkerService::WorkerService(int rank, std::string secret, ModelRunnerFactory runner_factory,
                             std::function<void()> on_shutdown, absl::Duration owner_timeout,
                             int max_receive_message_bytes)
    : rank_(rank),
      secret_(std::move(secret)),
      runner_factory_(std::move(runner_factory)),
      on_shutdown_(std::move(on_shutdown)),
      max_receive_message_bytes_(max_receive_message_bytes),
      ownership_(owner_timeout) {}

bool WorkerService::HasSecret(std::optional<absl::string_view> presented,
                              absl::string_view peer) const {
  if (!secret_.empty() && presented.has_value() && ConstantTimeEquals(secret_, *presented)) {
    return true;
  }
  const int64_t refused = refused_calls_.fetch_add(1) + 1;
  // At most one line a second however fast a hostile peer calls.
  const int64_t now_ns = absl::GetCurrentTimeNanos();
  int64_t last_ns = last_refusal_log_ns_.load();
  if (now_ns - last_ns >= absl::ToInt64Nanoseconds(absl::Seconds(1)) &&
      last_refusal_log_ns_.compare_exchange_strong(last_ns, now_ns)) {
    LOG(WARNING) << "rank " << rank_ << ": refused a call without the server's secret from "
                 << peer << " (" << refused << " refused so far)";
  }
  return false;
}

grpc::Status WorkerService::Authenticate(const grpc::ServerContext& context) const {
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find(kWorkerSecretMetadataKey);
  std::optional<absl::string_view> presented;
  if (found != metadata.end()) {
    presented = absl::string_view(found->second.data(), found->second.size());
  }
  if (!HasSecret(presented, context.peer())) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kRefusalMessage);
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Admit(const grpc::ServerContext& context, bool claim) {
  if (grpc::Status auth = Authenticate(context); !auth.ok()) return auth;
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find(wire::kWorkerOwnerMetadataKey);
  const absl::string_view owner =
      found == metadata.end() ? absl::string_view()
                              : absl::string_view(found->second.data(), found->second.size());
  const absl::Status owned =
      claim ? ownership_.Claim(owner, absl::Now()) : ownership_.Check(owner, absl::Now());
  if (!owned.ok()) {
    LOG(WARNING) << "rank " << rank_ << ": refused a call from " << context.peer() << ": "
                 << owned;
  }
  return ToGrpcStatus(owned);
}

grpc::Status WorkerService::LoadModel(grpc::ServerContext* context,
                                      const v1::LoadModelRequest* request,
                                      v1::LoadModelResponse* response) {
  if (grpc::Status admitted = Admit(*context, /*claim=*/true); !admitted.ok()) return admitted;
  absl::MutexLock lock(&mutex_);
  LOG(INFO) << "rank " << rank_ << ": LoadModel " << request->model_dir() << " (device '"
            << request->device() << "', world size " << request->world_size() << ")";
  // Drop the old model first so its memory is free before the new one loads.
  SetAbortable(nullptr);
  SetLoraLoader(nullptr);
  runner_.reset();
  cache_ready_ = false;
  block_tables_.Reset(0);     // A new runner knows no step.
  fault_ = absl::OkStatus();  // A fresh runner is a fresh start.
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner = runner_factory_(request->device());
  if (!runner.ok()) return ToGrpcStatus(runner.status());
  absl::StatusOr<v1::LoadModelResponse> loaded = (*runner)->LoadModel(*request);
  if (!loaded.ok()) {
    LOG(WARNING) << "rank " << rank_ << ": LoadModel failed: " << loaded.status();
    return ToGrpcStatus(loaded.status());
  }
  *response = *std::move(loaded);
  response->set_max_receive_message_bytes(max_receive_message_bytes_);
  runner_ = *std::move(runner);
  SetAbortable(runner_.get());
  SetLoraLoader(runner_.get());
  LOG(INFO) << "rank " << rank_ << ": model loaded, " << response->num_gpu_blocks()
            << " KV blocks of " << response->bytes_per_block() << " bytes fit";
  return grpc::Status::OK;
}

grpc::Status WorkerService::InitCache(grpc::ServerContext* context,
                                      const v1::InitCacheRequest* request,
                                      v1::InitCacheResponse* /*response*/) {
  if (grpc::Status admitted = Admit(*context, /*claim=*/false); !admitted.ok()) return admitted;
  absl::MutexLock lock(&mutex_);
  if (runner_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "InitCache before LoadModel");
  }
  if (absl::Status healthy = CheckHealthy(); !healthy.ok()) return ToGrpcStatus(healthy);
  cache_ready_ = false;
  block_tables_.Reset(request->num_gpu_blocks());  // The old tables' blocks are gone.
  absl::Status status = runner_->InitCache(*request);
  if (!status.ok()) {
    LOG(WARNING) << "rank " << rank_ << ": InitCache failed: " << status;
    return ToGrpcStatus(status);
  }
  cache_ready_ = true;
  LOG(INFO) << "rank " << rank_ << ": KV cache ready, " << request->num_gpu_blocks()
            << " device blocks, " << request->num_cpu_blocks() << " swap blocks";
  return grpc::Status::OK;
}

grpc::Status WorkerService::ExecuteStep(grpc::ServerContext* context, const v1::StepPlan* plan,
                                        v1::StepResult* result) {
  if (grpc::Status admitted = Admit(*context, /*claim=*/false); !admitted.ok()) return admitted;
  absl::MutexLock lock(&mutex_);
  if (runner_ == nullptr || !cache_ready_) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "ExecuteStep before LoadModel and InitCache");
  }
  if (absl::Status healthy = CheckHealthy(); !healthy.ok()) return ToGrpcStatus(healthy);
  masks_.Begin(plan->step_id());
  cancellation_.Begin(context, [this] {
    AbortCollectives();
    masks_.Cancel();
  });
  // The masks a plan promises come by SendStepMasks, before the call's
  // deadline (the server's step deadline).
  const absl::Time deadline = absl::FromChrono(context->deadline());
  // gRPC hands the plan over const: one with row deltas (block tables,
  // unchanged sampling options) is resolved in a copy (the step channel,
  // spawned workers' path, resolves in place).
  v1::StepPlan resolved;
  const v1::StepPlan* run = plan;
  absl::Status tables;
  if (HasRowDeltas(*plan)) {
    resolved = *plan;
    run = &resolved;
    tables = ResolveBlockTables(&resolved);
  } else {
    block_tables_.Record(*plan);
  }
  absl::StatusOr<v1::StepResult> executed =
      tables.ok() ? RunStep(*run, [this, deadline] { return masks_.Await(deadline); })
                  : absl::StatusOr<v1::StepResult>(tables);
  cancellation_.End();
  masks_.End();
  if (!executed.ok()) return ToGrpcStatus(executed.status());
  *result = *std::move(executed);
  return grpc::Status::OK;
}

void WorkerService::SetLoraLoader(ModelRunner* runner) {
  absl::MutexLock lock(&lora_mutex_);
  model_loaded_ = runner != nullptr;
  lora_loader_ = runner != nullptr ? runner->lora_loader() : nullptr;
}

absl::StatusOr<std::shared_ptr<LoraAdapterLoader>> WorkerService::LoraLoader() {
  absl::MutexLock lock(&lora_mutex_);
  if (!model_loaded_) return absl::FailedPreconditionError("LoRA call before LoadModel");
  if (lora_loader_ == nullptr) {
    return absl::FailedPreconditionError("this worker serves no LoRA adapters (max_loras 0)");
  }
  return lora_loader_;
}

grpc::Status WorkerService::LoadLoraAdapter(grpc::ServerContext* context,
                                            const v1::LoadLoraAdapterRequest* request,
                                            v1::LoadLoraAdapterResponse* response) {
  if (grpc::Status admitted = Admit(*context, /*claim=*/false); !admitted.ok()) return admitted;
  absl::StatusOr<std::shared_ptr<LoraAdapterLoader>> loader = LoraLoader();
  if (!loader.ok()) return ToGrpcStatus(loader.status());
  absl::StatusOr<LoraLoadResult> loaded = (*loader)->Load(request->slot(), request->path());
  if (!loaded.ok()) {
    LOG(WARNING) << "rank " << rank_ << ": LoRA load into slot " << request->slot()
                 << " failed: " << loaded.status();
    return ToGrpcStatus(loaded.status());
  }
  response->set_rank(loaded->rank);
  response->set_bytes(loaded->bytes);
  response->set_load_seconds(loaded->seconds);
  LOG(INFO) << "rank " << rank_ << ": LoRA adapter of rank " << loaded->rank << " in slot "
            << request->slot() << " (" << loaded->bytes / 1024 << " KiB, " << loaded->seconds
            << " s)";
  return grpc::Status::OK;
}

grpc::Status WorkerService::UnloadLoraAdapter(grpc::ServerContext* context,
                                              const v1::UnloadLoraAdapterRequest* request,
                                              v1::UnloadLoraAdapterResponse* /*response*/) {
  if (grpc::Status admitted = Admit(*context, /*claim=*/false); !admitted.ok()) return admitted;
  absl::StatusOr<std::shared_ptr<LoraAdapterLoader>> loader = LoraLoader();
  if (!loader.ok()) return ToGrpcStatus(loader.status());
  return ToGrpcStatus((*loader)->Unload(request->slot()));
}

grpc::Status WorkerService::SendStepMasks(grpc::ServerContext* context, const v1::StepMasks* masks,
                                          v1::StepMasksResponse* /*response*/) {
  if (grpc::Status admitted = Admit(*context, /*claim=*/false); !admitted.ok()) return admitted;
  masks_.Deliver(*masks);  // A mismatch refuses the step, on every rank alike.
  return grpc::Status::OK;
}

absl::StatusOr<v1::StepResult> WorkerService::ExecuteLocalStep(v1::StepPlan* plan,
                                                               const StepMaskWait& wait_for_masks) {
  absl::MutexLock lock(&mutex_);
  if (runner_ == nullptr || !cache_ready_) {
    return absl::FailedPreconditionError("ExecuteStep before LoadModel and InitCache");
  }
  if (absl::Status healthy = CheckHealthy(); !healthy.ok()) return healthy;
  if (absl::Status tables = ResolveBlockTables(plan); !tables.ok()) return tables;
  return RunStep(*plan, wait_for_masks);
}

absl::Status WorkerService::ResolveBlockTables(v1::StepPlan* plan) {
  absl::Status resolved = block_tables_.Resolve(plan);
  if (!resolved.ok()) {
    block_tables_.Clear();
    LOG(WARNING) << "rank " << rank_ << ": step " << plan->step_id() << " refused: " << resolved;
  }
  return resolved;
}

absl::StatusOr<v1::StepResult> WorkerService::RunStep(const v1::StepPlan& plan,
                                                      const StepMaskWait& wait_for_masks) {
  const absl::Time start = absl::Now();
  idle_between_steps_.StepStarted(start);
  absl::StatusOr<v1::StepResult> executed = runner_->ExecuteStep(plan, wait_for_masks);
  idle_between_steps_.StepEnded(absl::Now());
  // Deltas extend the tables of a completed step only.
  if (executed.ok()) {
    block_tables_.Commit();
  } else {
    block_tables_.Clear();
  }
  if (!executed.ok()) {
    const absl::Status& status = executed.status();
    // A device fault (INTERNAL, as AsWorkerFault makes it) leaves the
    // device untrustworthy. A failed collective (ABORTED, UNAVAILABLE,
    // DEADLINE_EXCEEDED) already keeps failing in the runner until the group
    // is loaded again, and a cancelled step is the server's own doing.
    if (IsDeviceFaultCode(status.code())) {
      fault_ = absl::Status(status.code(),
                            absl::StrCat("step ", plan.step_id(), ": ", status.message()));
      LOG(ERROR) << "rank " << rank_ << ": step " << plan.step_id() << " failed; worker unhealthy "
                 << "until the next LoadModel: " << status;
    } else {
      LOG(WARNING) << "rank " << rank_ << ": step " << plan.step_id() << " refused: " << status;
    }
    return status;
  }
  executed->set_step_id(plan.step_id());
  // The runner may time itself more narrowly; fill in the time only if not.
  if (executed->forward_seconds() == 0) {
    executed->set_forward_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  }
  return executed;
}

absl::Status WorkerService::CheckHealthy() const {
  if (fault_.ok()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat("rank ", rank_, " is unhealthy since a fault (", fault_.ToString(),
                   "); a LoadModel replaces its runner"));
}

absl::Status WorkerService::fault() const {
  absl::MutexLock lock(&mutex_);
  return fault_;
}

void WorkerService::SetAbortable(ModelRunner* runner) {
  absl::MutexLock lock(&abort_mutex_);
  abortable_runner_ = runner;
}

void WorkerService::AbortCollectives() {
  absl::MutexLock lock(&abort_mutex_);
  if (abortable_runner_ != nullptr) abortable_runner_->Abort();
}

grpc::Status WorkerService::Shutdown(grpc::ServerContext* context,
                                     const v1::ShutdownRequest* /*request*/,
                                     v1::ShutdownResponse* /*response*/) {
  if (grpc::Status admitted = Admit(*context, /*claim=*/false); !admitted.ok()) return admitted;
  LOG(INFO) << "rank " << rank_ << ": Shutdown requested";
  const auto& metadata = context->client_metadata();
  if (const auto found = metadata.find(wire::kWorkerOwnerMetadataKey); found != metadata.end()) {
    ownership_.Release(absl::string_view(found->second.data(), found->second.size()));
  }
  // Only signals: the owner stops the server, which waits for this reply.
  if (on_shutdown_) on_shutdown_();
  return grpc::Status::OK;
}

grpc::Status WorkerService::Heartbeat(grpc::ServerContext* context,
                                      const v1::HeartbeatRequest* /*request*/,
                                      v1::HeartbeatResponse* /*response*/) {
  return Admit(*context, /*claim=*/false);
}

}  // namespace pagoda::worker
