// main() of every GPU test binary: see gpu_test_main.h.

#include "kernels/testing/gpu_test_main.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace pagoda::kernels::testing {

bool HasCudaDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace pagoda::kernels::testing

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (!pagoda::kernels::testing::HasCudaDevice()) {
    std::printf("no CUDA device: every test of this binary is skipped (exit code %d)\n",
                pagoda::kernels::testing::kGpuTestSkipExitCode);
    return pagoda::kernels::testing::kGpuTestSkipExitCode;
  }
  return RUN_ALL_TESTS();
}
