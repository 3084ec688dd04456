// The start-up check shared by every GPU test binary (kernels/, worker/cuda/):
// such a binary links gpu_test_main.cc instead of gtest_main, so it asks once,
// before any test runs, whether a CUDA device is usable. Without one it exits
// with kGpuTestSkipExitCode, which ctest maps to "Skipped" (SKIP_RETURN_CODE);
// with one, every test runs and any failure fails the binary. No test skips
// itself: a partly-skipped binary can no longer hide a real failure.
#ifndef PAGODA_TESTS_KERNELS_GPU_TEST_MAIN_H_
#define PAGODA_TESTS_KERNELS_GPU_TEST_MAIN_H_

#include <string>

namespace pagoda::kernels::testing {

// The Automake convention for "skipped"; cmake/PagodaTest.cmake sets the same
// number as SKIP_RETURN_CODE for tests added with GPU.
inline constexpr int kGpuTestSkipExitCode = 77;

// What the machine has. Only "absent" skips: no GPU (cudaErrorNoDevice), or
// no driver library at all. Any other CUDA error at start-up (a driver too
// old for the runtime, a failed initialisation, a GPU that fell off the bus)
// is "broken", and the test binary fails: a broken GPU is not "no GPU".
enum class CudaPresence { kDevice, kAbsent, kBroken };

struct CudaProbe {
  CudaPresence presence = CudaPresence::kAbsent;
  std::string error;  // the CUDA error's name and text, when there was one
};

// Asks cudaGetDeviceCount once and clears the sticky error it may leave.
CudaProbe ProbeCuda();


}  // namespace pagoda::kernels::testing

#endif  // PAGODA_TESTS_KERNELS_GPU_TEST_MAIN_H_
