// Runs on a GPU machine; the GPU test main exits with the skip code (ctest:
// Skipped) where no CUDA device is visible.
#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"

namespace pagoda::worker::comm {
namespace {

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

TEST(NcclCommunicatorTest, RefusesBadOptionsWithoutTouchingNccl) {
  NcclOptions options;
  options.unique_id = "short";
  EXPECT_EQ(CreateNcclCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.unique_id = std::string(kNcclUniqueIdBytes, '\0');
  options.rank = 1;
  EXPECT_EQ(CreateNcclCommunicator(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// A group of one on the caller's stream, in the activation dtypes the model
// all-reduces (bf16, f16): the sum of one rank is its own data, in stream
// order after a kernel-free copy queued before it; ABORTED after Abort.
TEST(NcclCommunicatorTest, SizeOneAllReducesBf16AndF16OnTheCallersStream) {
  auto id = CreateNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto comm = CreateNcclCommunicator(NcclOptions{.rank = 0,
                                                 .world_size = 1,
                                                 .device = 0,
                                                 .unique_id = *id,
                                                 .stream = stream,
                                                 .timeout = std::chrono::milliseconds(60000)});
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->world_size(), 1);
  constexpr size_t kCount = 4099;
  std::vector<uint16_t> host(kCount), back(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<uint16_t>(0x3c00 + i % 512);
  uint16_t* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kCount * sizeof(uint16_t)), cudaSuccess);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    cudaMemcpyAsync(device, host.data(), kCount * sizeof(uint16_t), cudaMemcpyHostToDevice, stream);
    ASSERT_TRUE((*comm)->AllReduceSum(device, kCount, dtype).ok()) << DTypeName(dtype);
    cudaMemcpyAsync(back.data(), device, kCount * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(back, host) << DTypeName(dtype);
  }
  EXPECT_TRUE((*comm)->AllReduceSum(device, 0, DType::kBF16).ok());  // Nothing to do.
  (*comm)->Abort();  // No collective in flight: ncclCommAbort right here.
  EXPECT_EQ((*comm)->AllReduceSum(device, kCount, DType::kBF16).code(), absl::StatusCode::kAborted);
  EXPECT_EQ((*comm)->AllGather(device, kCount, DType::kBF16).code(), absl::StatusCode::kAborted);
  comm->reset();
  cudaFree(device);
  cudaStreamDestroy(stream);
}

// Every visible device (up to 4) is one rank, each driven by its own thread.
TEST(NcclCommunicatorTest, AllReduceAndAllGatherAcrossDevices) {
  const int world = std::min(DeviceCount(), 4);  // >= 1: the GPU test main checked.
  auto id = CreateNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  constexpr size_t kCount = 1029;  // Odd on purpose.
  std::vector<std::string> errors(world);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < world; ++rank) {
    ranks.emplace_back([&, rank] {
      NcclOptions options;
      options.rank = rank;
      options.world_size = world;
      options.device = rank;
      options.unique_id = *id;
      options.timeout = std::chrono::milliseconds(60000);
      options.group_secret = "0123456789abcdef0123456789abcdef";
      auto comm = CreateNcclCommunicator(options);
      if (!comm.ok()) return void(errors[rank] = comm.status().ToString());
      std::vector<float> host(kCount * world);
      for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(rank + 1) * (i % 7);
      float* device = nullptr;
      cudaMalloc(&device, host.size() * sizeof(float));
      cudaMemcpy(device, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
      // A pageable cudaMemcpy may return before its DMA lands, and the
      // communicator's own stream is non-blocking (no implicit ordering with
      // the legacy stream): wait before the collective reads the buffer.
      cudaDeviceSynchronize();
      absl::Status s = (*comm)->AllReduceSum(device, kCount, DType::kF32);
      cudaMemcpy(host.data(), device, kCount * sizeof(float), cudaMemcpyDeviceToHost);
      const float rank_sum = static_cast<float>(world * (world + 1) / 2);
      for (size_t i = 0; s.ok() && i < kCount; ++i) {
        if (host[i] != rank_sum * (i % 7)) s = absl::InternalError("wrong all-reduce sum");
      }
      // All-gather: rank r's part is r everywhere.
      std::vector<float> part(kCount, static_cast<float>(rank));
      cudaMemcpy(device + kCount * rank, part.data(), kCount * sizeof(float),
                 cudaMemcpyHostToDevice);
      cudaDeviceSynchronize();  // As above.
      if (s.ok()) s = (*comm)->AllGather(device, kCount, DType::kF32);
      cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost);
      for (size_t i = 0; s.ok() && i < host.size(); ++i) {
        if (host[i] != static_cast<float>(i / kCount)) s = absl::InternalError("wrong gather");
      }
      (*comm)->Abort();
      if (s.ok() &&
          (*comm)->AllReduceSum(device, kCount, DType::kF32).code() != absl::StatusCode::kAborted) {
        s = absl::InternalError("collective after Abort did not fail with ABORTED");
      }
      cudaFree(device);
      if (!s.ok()) errors[rank] = s.ToString();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int rank = 0; rank < world; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

}  // namespace
}  // namespace pagoda::worker::comm
