#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "wire/limits.h"
#include "wire/worker_secret.h"
#include "worker/comm/collective_proof.h"

namespace pagoda::worker::comm {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes);
using Clock = std::chrono::steady_clock;

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kFp8E4M3:  // Refused by ValidateCollectiveArgs first.
    case DType::kFp8E5M2:
    case DType::kF32:
      break;
  }
  return ncclFloat32;
}

absl::Status CudaError(cudaError_t error, const char* what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

// Polls a non-blocking communicator until its last call left ncclInProgress.
ncclResult_t PollAsync(ncclComm_t comm, Clock::time_point deadline,
                       const std::atomic<bool>& aborted) {
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress) {
    if (aborted.load() || Clock::now() > deadline) return ncclInProgress;
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) std::this_thread::yield();
  }
  return state;
}

class NcclCommunicator final : public CollectiveCommunicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int world, int device, cudaStream_t stream,
                   bool owns_stream, std::chrono::milliseconds timeout)
      : comm_(comm),
        rank_(rank),
        world_(world),
        device_(device),
        stream_(stream),
        owns_stream_(owns_stream),
        timeout_(timeout) {
    cudaEventCreateWithFlags(&done_, cudaEventDisableTiming);
  }
  ~NcclCommunicator() override {
    {
      absl::MutexLock lock(&mu_);
      if (comm_ != nullptr) ncclCommDestroy(comm_);
      comm_ = nullptr;
    }
    cudaEventDestroy(done_);
    if (owns_stream_) cudaStreamDestroy(stream_);
  }

  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override {
    return Run(data, count, dtype, "AllReduceSum", [&](ncclComm_t comm) {
      return ncclAllReduce(data, data, count, NcclType(dtype), ncclSum, comm, stream_);
    });
  }

  absl::Status AllGather(void* data, size_t count, DType dtype) override {
    // In place: NCCL's in-place form sends from the rank's own slot.
    const void* own = static_cast<char*>(data) + count * DTypeSize(dtype) * rank_;
    return Run(data, count, dtype, "AllGather", [&](ncclComm_t comm) {
      return ncclAllGather(own, data, count, NcclType(dtype), comm, stream_);
    });
  }

  void Abort() override {
    aborted_ = true;
    absl::MutexLock lock(&mu_);
    // With a collective in flight its thread aborts the communicator when it
    // sees the flag; otherwise nothing else uses it and we abort it here.
    if (!in_flight_ && comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }

 private:
  template <typename Enqueue>
  absl::Status Run(void* data, size_t count, DType dtype, const char* what, Enqueue enqueue) {
    if (!failure_.ok()) return failure_;
    if (absl::Status s = ValidateCollectiveArgs(data, count, dtype, world_, what);
        !s.ok() || count == 0) {
      return s;
    }
    ncclComm_t comm;
    {
      absl::MutexLock lock(&mu_);
      if (aborted_ || comm_ == nullptr)
        return failure_ = absl::AbortedError("communicator aborted");
      in_flight_ = true;
      comm = comm_;
    }
    failure_ = Wait(comm, enqueue);
    absl::MutexLock lock(&mu_);
    in_flight_ = false;
    if (!failure_.ok() && comm_ != nullptr) {
      ncclCommAbort(comm_);  // Frees the GPU from a collective that will never finish.
      comm_ = nullptr;
    }
    return failure_;
  }

  template <typename Enqueue>
  absl::Status Wait(ncclComm_t comm, Enqueue& enqueue) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    cudaSetDevice(device_);
    ncclResult_t result = enqueue(comm);
    if (result == ncclInProgress) result = PollAsync(comm, deadline, aborted_);
    if (result != ncclSuccess) return Classify(result);
    if (cudaError_t e = cudaEventRecord(done_, stream_); e != cudaSuccess) {
      return CudaError(e, "cudaEventRecord");
    }
    while (true) {
      cudaError_t query = cudaEventQuery(done_);
      if (query == cudaSuccess) return absl::OkStatus();
      if (query != cudaErrorNotReady) return CudaError(query, "collective");
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm, &async);
      if (async != ncclSuccess && async != ncclInProgress) return Classify(async);
      if (aborted_.load()) return absl::AbortedError("communicator aborted");
      if (Clock::now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("collective timed out after ", timeout_.count(), " ms"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  absl::Status Classify(ncclResult_t result) {
    if (aborted_.load()) return absl::AbortedError("communicator aborted");
    if (result == ncclInProgress) {
      return absl::DeadlineExceededError(
          absl::StrCat("collective timed out after ", timeout_.count(), " ms"));
    }
    return absl::UnavailableError(absl::StrCat("NCCL: ", ncclGetErrorString(result)));
  }

  absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> aborted_{false};
  const int rank_;
  const int world_;
  const int device_;
  cudaStream_t stream_;
  const bool owns_stream_;
  const std::chrono::milliseconds timeout_;
  cudaEvent_t done_ = nullptr;
  absl::Status failure_;  // Owned by the collective thread.
};

// The proof's byte rounds through NCCL's own connections, staged through a
// device buffer (NCCL moves device memory). AllGather moves bytes as they
// are, whatever the dtype says.
absl::Status ProveOverNccl(CollectiveCommunicator& comm, const NcclOptions& options) {
  GatherBytes gather = [&comm, &options](char* all, size_t part_bytes) {
    const size_t total = part_bytes * static_cast<size_t>(options.world_size);
    void* staged = nullptr;
    if (cudaError_t e = cudaMalloc(&staged, total); e != cudaSuccess) {
      return CudaError(e, "cudaMalloc for the group proof");
    }
    // A pageable copy may return before its DMA lands: synchronize before
    // the communicator's (non-blocking) stream reads it.
    cudaError_t e = cudaMemcpy(staged, all, total, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    absl::Status status = e == cudaSuccess ? comm.AllGather(staged, part_bytes / sizeof(float),
                                                            DType::kF32)
                                           : CudaError(e, "group proof upload");
    if (status.ok()) {
      e = cudaMemcpy(all, staged, total, cudaMemcpyDeviceToHost);
      if (e != cudaSuccess) status = CudaError(e, "group proof download");
    }
    cudaFree(staged);
    return status;
  };
  return ProveGroupSecret(options.rank, options.world_size, options.group_secret,
                          options.unique_id, gather);
}

absl::Status CheckNcclGroupSecret(const NcclOptions& options) {
  if (options.world_size > 1 && (options.group_secret.size() < kMinWorkerSecretBytes ||
                                 options.group_secret.size() > kMaxWorkerSecretBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL communicator: a group of ", options.world_size, " needs a group secret of ",
        kMinWorkerSecretBytes, " to ", kMaxWorkerSecretBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> CreateNcclUniqueId() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
  }
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<CollectiveCommunicator>> CreateNcclCommunicator(
    const NcclOptions& options) {
  if (options.world_size < 1 || options.world_size > wire::kMaxWorldSize || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL communicator: rank ", options.rank,
                                                   " of world size ", options.world_size));
  }
  if (options.unique_id.size() != kNcclUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL unique id must be ", kNcclUniqueIdBytes,
                                                   " bytes, got ", options.unique_id.size()));
  }
  if (options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("NCCL communicator: timeout must be positive");
  }
  if (absl::Status s = CheckNcclGroupSecret(options); !s.ok()) return s;
  if (cudaError_t e = cudaSetDevice(options.device); e != cudaSuccess) {
    return CudaError(e, "cudaSetDevice");
  }
  cudaStream_t stream = static_cast<cudaStream_t>(options.stream);
  const bool owns_stream = stream == nullptr;
  if (owns_stream) {
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return CudaError(e, "cudaStreamCreate");
    }
  }
  ncclUniqueId id;
  std::memcpy(&id, options.unique_id.data(), sizeof(id));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // So init and collectives can be bounded and aborted.
  ncclComm_t comm = nullptr;
  ncclResult_t result =
      ncclCommInitRankConfig(&comm, options.world_size, id, options.rank, &config);
  std::atomic<bool> never_aborted{false};
  if (result == ncclInProgress) {
    result = PollAsync(comm, Clock::now() + options.timeout, never_aborted);
  }
  if (result != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    if (owns_stream) cudaStreamDestroy(stream);
    if (result == ncclInProgress) {
      return absl::DeadlineExceededError(absl::StrCat("rank ", options.rank,
                                                      " could not join the NCCL group within ",
                                                      options.timeout.count(), " ms"));
    }
    return absl::UnavailableError(absl::StrCat(
        "rank ", options.rank, " could not join the NCCL group: ", ncclGetErrorString(result)));
  }
  auto communicator = std::unique_ptr<CollectiveCommunicator>(
      new NcclCommunicator(comm, options.rank, options.world_size, options.device, stream,
                           owns_stream, options.timeout));
  if (absl::Status proved = ProveOverNccl(*communicator, options); !proved.ok()) {
    communicator->Abort();  // The peers' pending rounds end now, not at their timeout.
    return proved;
  }
  return communicator;
}

}  // namespace pagoda::worker::comm
