#include "worker/cuda/nccl_transport.h"

#include "worker/comm/nccl_communicator.h"
#include "worker/comm/unique_id_relay.h"

namespace pagoda::worker {

GroupTransport NcclTransport(int device, void* stream) {
  return [device, stream](
             const GroupMembership& membership) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    auto id = comm::ShareUniqueId(membership.rendezvous, membership.rank, membership.timeout,
                                  comm::kNcclUniqueIdBytes, comm::CreateNcclUniqueId);
    if (!id.ok()) return id.status();
    return comm::CreateNcclCommunicator(comm::NcclOptions{.rank = membership.rank,
                                                          .world_size = membership.world_size,
                                                          .device = device,
                                                          .unique_id = *std::move(id),
                                                          .stream = stream,
                                                          .timeout = membership.timeout,
                                                          .group_secret = membership.rendezvous.secret});
  };
}

}  // namespace pagoda::worker
