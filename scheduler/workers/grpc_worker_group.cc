#include "scheduler/workers/grpc_worker_group.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

namespace v1 = ::pagoda::worker::v1;

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

}  // namespace

GrpcWorkerGroup::GrpcWorkerGroup(const GrpcWorkerGroupOptions& options) : options_(options) {}

GrpcWorkerGroup::~GrpcWorkerGroup() { Shutdown(); }

absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> GrpcWorkerGroup::Connect(
    const std::vector<std::string>& addresses, absl::Duration connect_timeout,
    const GrpcWorkerGroupOptions& options) {
  if (addresses.empty()) return absl::InvalidArgumentError("no worker addresses");
  const absl::Time deadline = absl::Now() + connect_timeout;
  std::unique_ptr<GrpcWorkerGroup> group(new GrpcWorkerGroup(options));
  for (const std::string& address : addresses) {
    absl::Status added = group->AddRank(address, nullptr, deadline);
    if (!added.ok()) return added;
  }
  group->complete_ = true;
  return group;
}

absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> GrpcWorkerGroup::Launch(
    const std::string& worker_binary, int world_size, absl::Duration start_timeout,
    const GrpcWorkerGroupOptions& options) {
  if (world_size < 1) return absl::InvalidArgumentError("world size must be at least 1");
  const absl::Time deadline = absl::Now() + start_timeout;
  std::unique_ptr<GrpcWorkerGroup> group(new GrpcWorkerGroup(options));
  for (int rank = 0; rank < world_size; ++rank) {
    GrpcWorkerGroup* raw_group = group.get();
    // The group outlives the process's monitor thread: ranks_ is destroyed
    // first, and a failed spawn joins its monitor before returning.
    absl::StatusOr<std::unique_ptr<WorkerProcess>> process = WorkerProcess::Spawn(
        worker_binary, rank, deadline - absl::Now(), [raw_group, rank](const std::string& how) {
          raw_group->Fail(absl::StrCat("worker rank ", rank, " process ", how));
        });
    if (!process.ok()) return process.status();
    const std::string address = (*process)->address();
    absl::Status added = group->AddRank(address, *std::move(process), deadline);
    if (!added.ok()) return added;
  }
  group->complete_ = true;
  return group;
}

absl::Status GrpcWorkerGroup::AddRank(const std::string& address,
                                      std::unique_ptr<WorkerProcess> process, absl::Time deadline) {
  const int rank = static_cast<int>(ranks_.size());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Workers may still be starting: retry soon rather than after gRPC's
  // default backoff of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  const bool connected = channel->WaitForConnected(absl::ToChronoTime(deadline));
  ranks_.push_back(Rank{address, v1::Worker::NewStub(channel), std::move(process)});
  if (!connected) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach worker rank ", rank, " at ", address, " in time"));
  }
  return absl::OkStatus();
}

template <typename Request, typename Response, typename AsyncMethod>
absl::Status GrpcWorkerGroup::CallAllRanks(const char* name, AsyncMethod method,
                                           const std::vector<const Request*>& requests,
                                           absl::Duration timeout,
                                           std::vector<Response>& responses) {
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
  std::vector<v1::LoadModelRequest> per_rank(world_size(), request);
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
  v1::LoadModelResponse result = responses[0];
  for (const v1::LoadModelResponse& response : responses) {
    result.set_num_gpu_blocks(std::min(result.num_gpu_blocks(), response.num_gpu_blocks()));
  }
  return result;
}

absl::Status GrpcWorkerGroup::InitCache(const v1::InitCacheRequest& request) {
  std::vector<v1::InitCacheResponse> responses;
  return CallAllRanks(
      "InitCache",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->InitCache(context, request, response, std::move(done));
      },
      std::vector<const v1::InitCacheRequest*>(world_size(), &request), options_.init_cache_timeout,
      responses);
}

absl::StatusOr<v1::StepResult> GrpcWorkerGroup::ExecuteStep(const v1::StepPlan& plan) {
  std::vector<v1::StepResult> results;
  absl::Status status = CallAllRanks(
      "ExecuteStep",
      [](auto* stub, auto* context, auto* request, auto* response, auto done) {
        stub->ExecuteStep(context, request, response, std::move(done));
      },
      std::vector<const v1::StepPlan*>(world_size(), &plan), options_.step_timeout, results);
  if (!status.ok()) return status;
  return std::move(results[0]);
}

void GrpcWorkerGroup::Fail(const std::string& reason) {
  absl::MutexLock lock(&mutex_);
  if (failure_.empty()) {
    failure_ = reason;
    if (!shutting_down_) LOG(ERROR) << "worker group unhealthy: " << reason;
  }
  healthy_.store(false);
  for (grpc::ClientContext* context : in_flight_) context->TryCancel();
}

void GrpcWorkerGroup::Shutdown() {
  {
    absl::MutexLock lock(&mutex_);
    if (shutting_down_) return;
    shutting_down_ = true;
  }
  // From here on exits are expected: they must not read as failures.
  Fail("worker group was shut down");

  // Ask every worker (even in a failed group) to exit; errors do not matter.
  // Spawned workers of an incomplete group are terminated below.
  const int num_ranks = complete_ ? world_size() : 0;
  std::vector<grpc::ClientContext> contexts(num_ranks);
  std::vector<v1::ShutdownResponse> responses(num_ranks);
  const v1::ShutdownRequest request;
  absl::Mutex done_mutex;
  int remaining = num_ranks;
  const auto deadline = absl::ToChronoTime(absl::Now() + options_.shutdown_grace);
  for (int rank = 0; rank < num_ranks; ++rank) {
    contexts[rank].set_deadline(deadline);
    ranks_[rank].stub->async()->Shutdown(&contexts[rank], &request, &responses[rank],
                                         [&](grpc::Status) {
                                           absl::MutexLock lock(&done_mutex);
                                           --remaining;
                                         });
  }
  {
    absl::MutexLock lock(&done_mutex);
    done_mutex.Await(absl::Condition(
        +[](int* remaining) { return *remaining == 0; }, &remaining));
  }
  for (Rank& rank : ranks_) {
    if (rank.process == nullptr) continue;
    if (!rank.process->WaitForExit(options_.shutdown_grace)) {
      rank.process->Terminate(options_.shutdown_grace);
    }
  }
  LOG(INFO) << "worker group shut down (" << world_size() << " ranks)";
}

std::vector<pid_t> GrpcWorkerGroup::worker_pids() const {
  std::vector<pid_t> pids;
  for (const Rank& rank : ranks_) {
    if (rank.process != nullptr) pids.push_back(rank.process->pid());
  }
  return pids;
}

}  // namespace pagoda::scheduler
