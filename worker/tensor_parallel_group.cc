#include "worker/tensor_parallel_group.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/model_config.h"
#include "common/tensor_parallel_plan.h"
#include "wire/limits.h"
#include "worker/comm/tcp_communicator.h"

namespace pagoda::worker {

absl::StatusOr<GroupMembership> ParseGroupMembership(const v1::LoadModelRequest& request) {
  GroupMembership membership;
  membership.world_size = request.world_size() == 0 ? 1 : request.world_size();
  membership.rank = request.rank();
  if (membership.world_size < 1 || membership.world_size > wire::kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world_size must be in [1, ", wire::kMaxWorldSize, "], got ", request.world_size()));
  }
  if (membership.rank < 0 || membership.rank >= membership.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", request.rank(), " outside a tensor-parallel group of ", membership.world_size));
  }
  const int timeout_ms = request.collective_timeout_ms();
  if (timeout_ms < 0 || timeout_ms > kMaxCollectiveTimeout.count()) {
    return absl::InvalidArgumentError(absl::StrCat("collective_timeout_ms must be in [0, ",
                                                   kMaxCollectiveTimeout.count(), "], got ",
                                                   timeout_ms));
  }
  if (timeout_ms > 0) membership.timeout = std::chrono::milliseconds(timeout_ms);
  if (membership.world_size == 1) return membership;

  const std::vector<std::string> host_port =
      absl::StrSplit(request.rendezvous_address(), absl::MaxSplits(':', 1));
  int port = 0;
  if (host_port.size() != 2 || host_port[0].empty() || !absl::SimpleAtoi(host_port[1], &port) ||
      port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous_address must be IPv4:port for a group of ", membership.world_size,
                     ", got '", request.rendezvous_address().substr(0, 64), "'"));
  }
  if (request.rendezvous_secret().empty() || request.rendezvous_prefix().empty()) {
    return absl::InvalidArgumentError(
        "rendezvous_secret and rendezvous_prefix are required for more than one rank");
  }
  // The store client checks the host, the secret's and prefix's bounds.
  membership.rendezvous = comm::RendezvousAddress{.host = host_port[0],
                                                  .port = port,
                                                  .secret = request.rendezvous_secret(),
                                                  .prefix = request.rendezvous_prefix()};
  return membership;
}

absl::StatusOr<std::unique_ptr<Communicator>> JoinGroup(const GroupMembership& membership,
                                                        const std::string& model_dir,
                                                        const GroupTransport& transport) {
  if (membership.world_size == 1) return CreateSingleRankCommunicator();
  auto config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  if (absl::Status split = CheckTensorParallelSplit(*config, membership.world_size); !split.ok()) {
    return split;
  }
  return transport(membership);
}

GroupTransport TcpTransport(std::string listen_host) {
  return [listen_host = std::move(listen_host)](
             const GroupMembership& membership) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    return comm::CreateTcpCommunicator(
        comm::TcpCollectiveOptions{.rank = membership.rank,
                                   .world_size = membership.world_size,
                                   .rendezvous = membership.rendezvous,
                                   .listen_host = listen_host,
                                   .timeout = membership.timeout,
                                   .group_secret = membership.rendezvous.secret});
  };
}

}  // namespace pagoda::worker
