#include "scheduler/workers/grpc_worker_group.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "wire/worker_owner.h"
#include "wire/worker_secret.h"
#include "wire/limits.h"
#include "wire/worker_transport.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = ::pagoda::worker::v1;

// Step plans and results grow with the batch; gRPC's 4 MiB default is too
// small, no bound at all too trusting. Workers take the same.
// How often a connection watcher looks whether it should stop.
constexpr absl::Duration kWatchPeriod = absl::Milliseconds(200);
constexpr absl::Duration kDropGrace = absl::Milliseconds(100);

// Codes a worker returns on purpose when it rejects a request it understood;
// when every rank answers with the same one, nothing changed on any worker.
bool IsRequestLevelError(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::PERMISSION_DENIED:
      return true;
    default:
      return false;
  }
}

absl::Status ToAbslStatus(const grpc::Status& status, absl::string_view context) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(context, ": ", status.error_message()));
}

std::string DescribeGrpcError(const grpc::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())),
                      ": ", status.error_message());
}

// How to reach a worker that serves no TLS, as it serves (worker_main.cc):
// local credentials on a unix socket or loopback TCP, where its auth
// processor checks the secret before a call's message is read; plaintext on
// any other address.
std::shared_ptr<grpc::ChannelCredentials> PlaintextWorkerCredentials(absl::string_view address) {
  switch (wire::WorkerTransportOf(address)) {
    case wire::WorkerTransport::kUnixSocket:
      return grpc::experimental::LocalCredentials(UDS);
    case wire::WorkerTransport::kLoopbackTcp:
      return grpc::experimental::LocalCredentials(LOCAL_TCP);
    case wire::WorkerTransport::kNetworkTcp:
      return grpc::InsecureChannelCredentials();
  }
  return grpc::InsecureChannelCredentials();
}

}  // namespace

GrpcWorkerGroup::GrpcWorkerGroup(const GrpcWorkerGroupOptions& options, int world_size,
                                 std::string owner_id)
    : options_(options), world_size_(world_size), owner_id_(std::move(owner_id)) {}

absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> GrpcWorkerGroup::Create(
    const GrpcWorkerGroupOptions& options, int world_size) {
  absl::StatusOr<std::string> owner_id = wire::GenerateWorkerOwnerId();
  if (!owner_id.ok()) return owner_id.status();
  return std::unique_ptr<GrpcWorkerGroup>(
      new GrpcWorkerGroup(options, world_size, *std::move(owner_id)));
}

GrpcWorkerGroup::~GrpcWorkerGroup() {
  Shutdown();
  DropRanks();
}

absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> GrpcWorkerGroup::Connect(
    const std::vector<std::string>& addresses, const std::string& secret,
    absl::Duration connect_timeout, const GrpcWorkerGroupOptions& options) {
  if (addresses.empty()) return absl::InvalidArgumentError("no worker addresses");
  if (secret.empty()) return absl::InvalidArgumentError("connected workers need a secret");
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> created =
      Create(options, static_cast<int>(addresses.size()));
  if (!created.ok()) return created.status();
  std::unique_ptr<GrpcWorkerGroup> group = *std::move(created);
  group->addresses_ = addresses;
  group->connect_secret_ = secret;
  absl::Status started = group->StartRanks(absl::Now() + connect_timeout);
  if (!started.ok()) return started;
  group->complete_ = true;
  return group;
}

absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> GrpcWorkerGroup::Launch(
    const std::string& worker_binary, int world_size, absl::Duration start_timeout,
    const GrpcWorkerGroupOptions& options) {
  if (world_size < 1) return absl::InvalidArgumentError("world size must be at least 1");
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> created = Create(options, world_size);
  if (!created.ok()) return created.status();
  std::unique_ptr<GrpcWorkerGroup> group = *std::move(created);
  group->worker_binary_ = worker_binary;
  absl::Status started = group->StartRanks(absl::Now() + start_timeout);
  if (!started.ok()) return started;
  group->complete_ = true;
  return group;
}

absl::Status GrpcWorkerGroup::StartRanks(absl::Time deadline) {
  for (int rank = 0; rank < world_size_; ++rank) {
    if (worker_binary_.empty()) {
      absl::Status added = AddRank(addresses_[rank], connect_secret_, nullptr, deadline);
      if (!added.ok()) return added;
      continue;
    }
    // The group outlives the process's monitor thread: ranks are destroyed
    // (DropRanks) before the group, and a failed spawn joins its monitor
    // before returning.
    absl::StatusOr<std::unique_ptr<WorkerProcess>> process = WorkerProcess::Spawn(
        worker_binary_, rank, deadline - absl::Now(), [this, rank](const std::string& how) {
          Fail(absl::StrCat("worker rank ", rank, " process ", how));
        },
        options_.worker_receive_limit_bytes);
    if (!process.ok()) return process.status();
    const std::string address = (*process)->address();
    const std::string secret = (*process)->secret();
    absl::Status added = AddRank(address, secret, *std::move(process), deadline);
    if (!added.ok()) return added;
  }
  return absl::OkStatus();
}

absl::Status GrpcWorkerGroup::AddRank(const std::string& address, const std::string& secret,
                                      std::unique_ptr<WorkerProcess> process, absl::Time deadline) {
  const int rank = static_cast<int>(ranks_.size());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(wire::kMaxWorkerMessageBytes);
  args.SetMaxSendMessageSize(wire::kMaxWorkerMessageBytes);
  // Workers may still be starting: retry soon rather than after gRPC's
  // default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Liveness while idle: pings on the open connection, and no idle timeout
  // (an idle channel leaving READY would read as a lost worker).
  const absl::Duration ping_after = std::min(absl::Seconds(1), options_.stall_timeout / 2);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(ping_after)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options_.stall_timeout - ping_after)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, std::numeric_limits<int>::max());
  // TLS for connected workers when configured, wherever they are; else as
  // the worker serves (worker/worker_process.cc).
  const bool tls = process == nullptr && options_.connect_credentials != nullptr;
  if (tls && !options_.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options_.tls_server_name);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      tls ? options_.connect_credentials : PlaintextWorkerCredentials(address);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, credentials, args);
  const bool connected = channel->WaitForConnected(absl::ToChronoTime(deadline));
  ranks_.push_back(
      Rank{address, secret, channel, v1::Worker::NewStub(channel), std::move(process)});
  if (!connected) {
    // A TLS handshake that fails looks the same as a worker not up yet.
    return absl::UnavailableError(absl::StrCat(
        "cannot reach worker rank ", rank, " at ", address, " in time",
        tls ? absl::StrCat(" (TLS: is the worker serving TLS, its certificate signed by the "
                           "--worker-ssl-ca-certs CA and naming ",
                           options_.tls_server_name.empty() ? "the dialled host"
                                                            : options_.tls_server_name,
                           ", and does its --ssl-ca-certs accept this server's certificate?)")
            : ""));
  }
  watchers_.emplace_back(&GrpcWorkerGroup::WatchConnection, this, rank, address, secret,
                         channel);
  return absl::OkStatus();
}

void GrpcWorkerGroup::WatchConnection(int rank, std::string address, std::string secret,
                                      std::shared_ptr<grpc::Channel> channel) {
  auto stopped = [this] {
    absl::MutexLock lock(&mutex_);
    return stop_watching_;
  };
  std::unique_ptr<v1::Worker::Stub> stub = v1::Worker::NewStub(channel);
  absl::Time next_heartbeat = absl::Now();
  while (!stopped()) {
    const grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/false);
    if (state != GRPC_CHANNEL_READY) {
      Fail(absl::StrCat("lost the connection to worker rank ", rank, " (", address, ")"));
      return;
    }
    if (absl::Now() >= next_heartbeat) {
      next_heartbeat = absl::Now() + wire::kOwnerHeartbeatPeriod;
      if (absl::Status lost = SendHeartbeat(*stub, secret); !lost.ok()) {
        Fail(absl::StrCat("worker rank ", rank, " (", address, "): ", lost.message()));
        return;
      }
    }
    // Wakes on a change, or after the period to look at stop_watching_.
    channel->WaitForStateChange(state, absl::ToChronoTime(absl::Now() + kWatchPeriod));
  }
}

absl::Status GrpcWorkerGroup::SendHeartbeat(v1::Worker::Stub& stub,
                                            const std::string& secret) const {
  grpc::ClientContext context;
  context.AddMetadata(kWorkerSecretMetadataKey, secret);
  context.AddMetadata(wire::kWorkerOwnerMetadataKey, owner_id_);
  context.set_deadline(absl::ToChronoTime(absl::Now() + wire::kOwnerHeartbeatPeriod));
  v1::HeartbeatResponse response;
  const grpc::Status status = stub.Heartbeat(&context, v1::HeartbeatRequest(), &response);
  // Liveness is the connection watch's and the keepalive's to judge (a slow
  // heartbeat is no lost worker); only a worker taken over is reported.
  if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
    return absl::FailedPreconditionError(status.error_message());
  }
  return absl::OkStatus();
}

void GrpcWorkerGroup::DropRanks() {
  {
    absl::MutexLock lock(&mutex_);
    stop_watching_ = true;
  }
  for (std::thread& watcher : watchers_) watcher.join();
  watchers_.clear();
  // A surviving rank of a broken group holds nothing worth a graceful stop
  // (its peers' collectives are gone): a short grace, then SIGKILL. Its
  // monitor reports the exit through Fail, which is harmless now.
  for (Rank& rank : ranks_) {
    if (rank.process != nullptr) rank.process->Terminate(kDropGrace);
  }
  ranks_.clear();
  absl::MutexLock lock(&mutex_);
  stop_watching_ = false;
}

void GrpcWorkerGroup::AddSecret(grpc::ClientContext& context, int rank) const {
  context.AddMetadata(kWorkerSecretMetadataKey, ranks_[rank].secret);
  context.AddMetadata(wire::kWorkerOwnerMetadataKey, owner_id_);
}

template <typename Request, typename Response, typename AsyncMethod>
absl::Status GrpcWorkerGroup::CallAllRanks(const char* name, AsyncMethod method,
                                           const std::vector<const Request*>& requests,
                                           absl::Duration timeout,
                                           std::vector<Response>& responses,
                                           const std::function<void()>& while_waiting) {
  const int num_ranks = world_size();
  responses.assign(num_ranks, Response());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  {
    absl::MutexLock lock(&mutex_);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
    for (int rank = 0; rank < num_ranks; ++rank) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      contexts.back()->set_deadline(deadline);
      AddSecret(*contexts.back(), rank);
      in_flight_.insert(contexts.back().get());
    }
  }

  absl::Mutex done_mutex;
  int remaining = num_ranks;
  std::vector<grpc::Status> statuses(num_ranks);
  for (int rank = 0; rank < num_ranks; ++rank) {
    method(ranks_[rank].stub->async(), contexts[rank].get(), requests[rank], &responses[rank],
           [&, rank](grpc::Status status) {
             // Broken rank: fail now and cancel the others, which could wait
             // on it forever (collectives). The health check also keeps a
             // cancellation-induced callback from re-entering Fail.
             if (!status.ok() && !IsRequestLevelError(status.error_code()) && healthy_.load()) {
               Fail(absl::StrCat("worker rank ", rank, " (", ranks_[rank].address, ") ", name,
                                 " failed: ", DescribeGrpcError(status)));
             }
             absl::MutexLock lock(&done_mutex);
             statuses[rank] = std::move(status);
             --remaining;
           });
  }
  if (while_waiting) while_waiting();
  {
    absl::MutexLock lock(&done_mutex);
    done_mutex.Await(absl::Condition(
        +[](int* remaining) { return *remaining == 0; }, &remaining));
  }
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& context : contexts) in_flight_.erase(context.get());
    if (!healthy_.load()) return absl::UnavailableError(failure_);
  }

  return MergeRankStatuses(name, statuses);
}

absl::Status GrpcWorkerGroup::MergeRankStatuses(const char* name,
                                                const std::vector<grpc::Status>& statuses) {
  const int num_ranks = static_cast<int>(statuses.size());
  int failed_rank = -1;
  for (int rank = 0; rank < num_ranks && failed_rank < 0; ++rank) {
    if (!statuses[rank].ok()) failed_rank = rank;
  }
  if (failed_rank < 0) return absl::OkStatus();
  const grpc::Status& first = statuses[failed_rank];
  const bool all_agree = std::all_of(statuses.begin(), statuses.end(), [&](const auto& status) {
    return status.error_code() == first.error_code();
  });
  if (all_agree) {
    // Every rank rejected the request the same way; they stay in step.
    return ToAbslStatus(first, absl::StrCat("worker rank ", failed_rank, " ", name));
  }
  Fail(absl::StrCat("worker ranks disagree on ", name, ": rank ", failed_rank, " (",
                    ranks_[failed_rank].address, ") failed with ", DescribeGrpcError(first),
                    " while others did not"));
  absl::MutexLock lock(&mutex_);
  return absl::UnavailableError(failure_);
}

absl::StatusOr<v1::LoadModelResponse> GrpcWorkerGroup::LoadModel(
    const v1::LoadModelRequest& request) {
  // Each rank gets its own rank number; everything else is shared.
  v1::LoadModelRequest shared = request;
  if (absl::Status prepared = PrepareRendezvous(shared); !prepared.ok()) return prepared;
  std::vector<v1::LoadModelRequest> per_rank(world_size(), shared);
  std::vector<const v1::LoadModelRequest*> requests;
  for (int rank = 0; rank < world_size(); ++rank) {
    per_rank[rank].set_rank(rank);
    per_rank[rank].set_world_size(world_size());
    requests.push_back(&per_rank[rank]);
  }
  std::vector<v1::LoadModelResponse> responses;
  absl::Status status = CallAllRanks(
      "LoadModel",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->LoadModel(context, request, response, std::move(done));
      },
      requests, options_.load_model_timeout, responses);
  if (!status.ok()) return status;
  last_load_ = request;
  v1::LoadModelResponse result = responses[0];
  for (int rank = 0; rank < world_size(); ++rank) {
    const v1::LoadModelResponse& response = responses[rank];
    result.set_num_gpu_blocks(std::min(result.num_gpu_blocks(), response.num_gpu_blocks()));
    if (response.max_receive_message_bytes() < options_.worker_receive_limit_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "worker rank ", rank, " (", ranks_[rank].address, ") accepts messages of at most ",
          response.max_receive_message_bytes(), " bytes (pagoda-worker --max-message-bytes), "
          "below the ", options_.worker_receive_limit_bytes,
          " bytes of this server's largest step plan; start it with --max-message-bytes=",
          options_.worker_receive_limit_bytes, " or lower the server's limits"));
    }
  }
  return result;
}

absl::Status GrpcWorkerGroup::PrepareRendezvous(v1::LoadModelRequest& request) {
  if (world_size() == 1) return absl::OkStatus();
  // A fresh store (and secret) per group: ranks need it only to join, and
  // keys of earlier groups (one set per reload or restart) never pile up.
  rendezvous_.reset();  // Frees a fixed --rendezvous-port for the new one.
  absl::StatusOr<std::string> secret = GenerateWorkerSecret();
  if (!secret.ok()) return secret.status();
  absl::StatusOr<std::unique_ptr<wire::RendezvousStoreServer>> store =
      wire::RendezvousStoreServer::Start(
          {.host = options_.rendezvous_host, .port = options_.rendezvous_port, .secret = *secret});
  if (!store.ok()) return store.status();
  rendezvous_ = *std::move(store);
  rendezvous_secret_ = *std::move(secret);
  LOG(INFO) << "tensor-parallel rendezvous store on " << options_.rendezvous_host << ":"
            << rendezvous_->port();
  request.set_rendezvous_address(absl::StrCat(options_.rendezvous_host, ":", rendezvous_->port()));
  request.set_rendezvous_secret(rendezvous_secret_);
  request.set_rendezvous_prefix(absl::StrCat("group", ++rendezvous_generation_));
  request.set_collective_timeout_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.collective_timeout)));
  return absl::OkStatus();
}

absl::Status GrpcWorkerGroup::InitCache(const v1::InitCacheRequest& request) {
  std::vector<v1::InitCacheResponse> responses;
  absl::Status status = CallAllRanks(
      "InitCache",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->InitCache(context, request, response, std::move(done));
      },
      std::vector<const v1::InitCacheRequest*>(world_size(), &request), options_.init_cache_timeout,
      responses);
  if (status.ok()) last_init_ = request;
  return status;
}

absl::StatusOr<v1::LoadLoraAdapterResponse> GrpcWorkerGroup::LoadLoraAdapter(
    const v1::LoadLoraAdapterRequest& request) {
  std::vector<v1::LoadLoraAdapterResponse> responses;
  absl::Status status = CallAllRanks(
      "LoadLoraAdapter",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->LoadLoraAdapter(context, request, response, std::move(done));
      },
      std::vector<const v1::LoadLoraAdapterRequest*>(world_size(), &request),
      options_.lora_load_timeout, responses);
  if (!status.ok()) return status;
  return responses[0];
}

absl::Status GrpcWorkerGroup::UnloadLoraAdapter(const v1::UnloadLoraAdapterRequest& request) {
  std::vector<v1::UnloadLoraAdapterResponse> responses;
  return CallAllRanks(
      "UnloadLoraAdapter",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->UnloadLoraAdapter(context, request, response, std::move(done));
      },
      std::vector<const v1::UnloadLoraAdapterRequest*>(world_size(), &request),
      options_.init_cache_timeout, responses);
}

absl::StatusOr<v1::StepResult> GrpcWorkerGroup::ExecuteStep(const v1::StepPlan& plan,
                                                            const StepMaskSource& masks) {
  const bool masks_follow = PromisesTokenMasks(plan);
  if (masks_follow && masks == nullptr) {
    // Nothing is sent: the workers would wait for masks that never come.
    return absl::InvalidArgumentError(
        absl::StrCat("step ", plan.step_id(), " promises token masks but has no source"));
  }
  if (StepChannelFd() >= 0) {
    return ExecuteStepOverChannel(plan, masks_follow ? masks : nullptr, StepChannelFd());
  }
  if (world_size() == 1 && !masks_follow) return ExecuteStepOnOneRank(plan);
  std::vector<v1::StepResult> results;
  absl::Status status = CallAllRanks(
      "ExecuteStep",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->ExecuteStep(context, request, response, std::move(done));
      },
      std::vector<const v1::StepPlan*>(world_size(), &plan), options_.step_timeout, results,
      [&] {
        if (masks_follow) SendStepMasks(masks());
      });
  if (!status.ok()) return status;
  return std::move(results[0]);
}

void GrpcWorkerGroup::SendStepMasks(const v1::StepMasks& masks) {
  std::vector<v1::StepMasksResponse> responses;
  const absl::Status sent = CallAllRanks(
      "SendStepMasks",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->SendStepMasks(context, request, response, std::move(done));
      },
      std::vector<const v1::StepMasks*>(world_size(), &masks), options_.step_timeout, responses);
  if (!sent.ok()) LOG(WARNING) << "step " << masks.step_id() << ": token masks: " << sent;
}

absl::StatusOr<v1::StepResult> GrpcWorkerGroup::ExecuteStepOnOneRank(const v1::StepPlan& plan) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.step_timeout));
  AddSecret(context, 0);
  {
    absl::MutexLock lock(&mutex_);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
    in_flight_.insert(&context);
  }
  v1::StepResult result;
  const grpc::Status status = ranks_[0].stub->ExecuteStep(&context, plan, &result);
  // The same verdict as CallAllRanks gives one rank.
  if (!status.ok() && !IsRequestLevelError(status.error_code()) && healthy_.load()) {
    Fail(absl::StrCat("worker rank 0 (", ranks_[0].address,
                      ") ExecuteStep failed: ", DescribeGrpcError(status)));
  }
  {
    absl::MutexLock lock(&mutex_);
    in_flight_.erase(&context);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
  }
  if (!status.ok()) return ToAbslStatus(status, "worker rank 0 ExecuteStep");
  return result;
}

absl::StatusOr<v1::StepResult> GrpcWorkerGroup::StepResultOfReplies(
    const std::vector<absl::Status>& io, const std::vector<std::string>& frames) {
  const int num_ranks = static_cast<int>(io.size());
  std::vector<v1::StepReply> replies(num_ranks);
  for (int rank = 0; rank < num_ranks; ++rank) {
    absl::Status read = io[rank];
    v1::StepReply& reply = replies[rank];
    if (read.ok() && !reply.ParseFromString(frames[rank])) {
      read = absl::DataLossError("malformed StepReply");
    }
    if (read.ok() &&
        (reply.code() < 0 || reply.code() > static_cast<int>(absl::StatusCode::kUnauthenticated))) {
      read = absl::DataLossError(absl::StrCat("StepReply with unknown status code ", reply.code()));
    }
    const auto code = static_cast<grpc::StatusCode>(reply.code());
    // The same verdicts as a gRPC call: a channel that failed (its frames
    // may be out of step now) or a worker-side failure makes the group
    // unhealthy, and so do ranks that disagree.
    if (!read.ok() && healthy_.load()) {
      Fail(absl::StrCat("worker rank ", rank, " step channel failed: ", read.ToString()));
    } else if (read.ok() && code != grpc::StatusCode::OK && !IsRequestLevelError(code)) {
      Fail(absl::StrCat("worker rank ", rank, " (", ranks_[rank].address, ") ExecuteStep failed: ",
                        absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), ": ",
                        reply.message()));
    } else if (read.ok() && reply.code() != replies[0].code()) {
      Fail(
          absl::StrCat("worker ranks disagree on ExecuteStep: rank ", rank, " answered ",
                       absl::StatusCodeToString(static_cast<absl::StatusCode>(code)), ", rank 0 ",
                       absl::StatusCodeToString(static_cast<absl::StatusCode>(replies[0].code()))));
    }
  }
  {
    absl::MutexLock lock(&mutex_);
    if (!healthy_.load()) return absl::UnavailableError(failure_);
  }
  // Every rank answered alike: rank 0 speaks for them.
  v1::StepReply& reply = replies[0];
  if (reply.code() != static_cast<int>(grpc::StatusCode::OK)) {
    return absl::Status(static_cast<absl::StatusCode>(reply.code()),
                        absl::StrCat("worker rank 0 ExecuteStep: ", reply.message()));
  }
  return std::move(*reply.mutable_result());
}

std::vector<pid_t> GrpcWorkerGroup::worker_pids() const {
  std::vector<pid_t> pids;
  for (const Rank& rank : ranks_) {
    if (rank.process != nullptr) pids.push_back(rank.process->pid());
  }
  return pids;
}

}  // namespace pagoda::scheduler
