// The start-up check shared by every GPU test binary (kernels/, worker/cuda/):
// such a binary links gpu_test_main.cc instead of gtest_main, so it asks once,
// before any test runs, whether a CUDA device is usable. Without one it exits
// with kGpuTestSkipExitCode, which ctest maps to "Skipped" (SKIP_RETURN_CODE);
// with one, every test runs and any failure fails the binary. No test skips
// itself: a partly-skipped binary can no longer hide a real failure.
#ifndef PAGODA_KERNELS_TESTING_GPU_TEST_MAIN_H_
#define PAGODA_KERNELS_TESTING_GPU_TEST_MAIN_H_

namespace pagoda::kernels::testing {

// The Automake convention for "skipped"; cmake/PagodaTest.cmake sets the same
// number as SKIP_RETURN_CODE for tests added with GPU.
inline constexpr int kGpuTestSkipExitCode = 77;

// True when cudaGetDeviceCount reports at least one device (false without a
// driver or GPU). Clears the sticky error a missing driver leaves.
bool HasCudaDevice();

}  // namespace pagoda::kernels::testing

#endif  // PAGODA_KERNELS_TESTING_GPU_TEST_MAIN_H_
