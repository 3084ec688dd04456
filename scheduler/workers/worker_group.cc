#include "scheduler/workers/worker_group.h"

#include "scheduler/workers/grpc_worker_group.h"

namespace pagoda::scheduler {

absl::StatusOr<std::unique_ptr<WorkerGroup>> ConnectWorkers(
    const std::vector<std::string>& addresses, const std::string& secret,
    absl::Duration connect_timeout) {
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> group =
      GrpcWorkerGroup::Connect(addresses, secret, connect_timeout);
  if (!group.ok()) return group.status();
  return std::unique_ptr<WorkerGroup>(*std::move(group));
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> LaunchLocalWorkers(const std::string& worker_binary,
                                                                int world_size,
                                                                absl::Duration start_timeout) {
  absl::StatusOr<std::unique_ptr<GrpcWorkerGroup>> group =
      GrpcWorkerGroup::Launch(worker_binary, world_size, start_timeout);
  if (!group.ok()) return group.status();
  return std::unique_ptr<WorkerGroup>(*std::move(group));
}

}  // namespace pagoda::scheduler
