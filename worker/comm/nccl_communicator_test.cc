// Runs on a GPU machine; the GPU test main exits with the skip code (ctest:
// Skipped) where no CUDA device is visible.
#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime.h>

#include <thread>
#include <vector>

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
      auto comm = CreateNcclCommunicator(options);
      if (!comm.ok()) return void(errors[rank] = comm.status().ToString());
      std::vector<float> host(kCount * world);
      for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(rank + 1) * (i % 7);
      float* device = nullptr;
      cudaMalloc(&device, host.size() * sizeof(float));
      cudaMemcpy(device, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice);
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
