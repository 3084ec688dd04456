// main() of every GPU test binary: see gpu_test_main.h.

#include "tests/kernels/gpu_test_main.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace pagoda::kernels::testing {
namespace {

// Whether the CUDA driver library is installed at all (the runtime reports a
// missing driver and one too old for it with the same error).
bool HasDriverLibrary() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return false;
  dlclose(driver);
  return true;
}

}  // namespace

CudaProbe ProbeCuda() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (error == cudaSuccess) {
    return count > 0 ? CudaProbe{CudaPresence::kDevice, ""} : CudaProbe{CudaPresence::kAbsent, ""};
  }
  const bool absent = error == cudaErrorNoDevice ||
                      (error == cudaErrorInsufficientDriver && !HasDriverLibrary());
  return CudaProbe{absent ? CudaPresence::kAbsent : CudaPresence::kBroken,
                   std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error)};
}

}  // namespace pagoda::kernels::testing

int main(int argc, char** argv) {
  using pagoda::kernels::testing::CudaPresence;
  testing::InitGoogleTest(&argc, argv);
  const pagoda::kernels::testing::CudaProbe probe = pagoda::kernels::testing::ProbeCuda();
  if (probe.presence == CudaPresence::kAbsent) {
    std::printf("no CUDA device or driver%s%s: every test of this binary is skipped (exit code %d)\n",
                probe.error.empty() ? "" : " ", probe.error.c_str(),
                pagoda::kernels::testing::kGpuTestSkipExitCode);
    return pagoda::kernels::testing::kGpuTestSkipExitCode;
  }
  if (probe.presence == CudaPresence::kBroken) {
    std::fprintf(stderr, "a CUDA driver is installed but the device is unusable (%s): failing\n",
                 probe.error.c_str());
    return 1;
  }
  return RUN_ALL_TESTS();
}
