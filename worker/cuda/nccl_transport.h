#ifndef PAGODA_WORKER_CUDA_NCCL_TRANSPORT_H_
#define PAGODA_WORKER_CUDA_NCCL_TRANSPORT_H_

// The CUDA runner's GroupTransport (tensor_parallel_group.h): NCCL. Built
// only with CUDA and NCCL (PAGODA_WORKER_HAS_NCCL); without NCCL the CUDA
// runner refuses world_size > 1.

#include "worker/tensor_parallel_group.h"

namespace pagoda::worker {

// Joins over NCCL on CUDA device `device`, collectives enqueued on `stream`
// (the backend's cudaStream_t, so an all-reduce is ordered after the kernels
// that produced its input without a device-wide sync). Rank 0 creates the
// NCCL unique id and publishes it in the group's rendezvous store (the
// server's, named in LoadModel); the other ranks fetch it there
// (comm::ShareUniqueId). The membership's timeout bounds the relay, the NCCL
// init and every collective. `stream` must outlive the communicator.
GroupTransport NcclTransport(int device, void* stream);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_NCCL_TRANSPORT_H_
