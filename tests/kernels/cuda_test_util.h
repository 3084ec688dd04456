#ifndef PAGODA_TESTS_KERNELS_CUDA_TEST_UTIL_H_
#define PAGODA_TESTS_KERNELS_CUDA_TEST_UTIL_H_

// Helpers for the kernel tests (run by tests/kernels/gpu_test_main.cc,
// which skips the whole binary without a device): an owning device buffer,
// and host-side encoding of f32/f16/bf16 arrays.

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/scalar_type.h"

namespace pagoda::kernels::testing {

#define PAGODA_ASSERT_CUDA_OK(expr)                                                          \
  do {                                                                                       \
    const cudaError_t pagoda_err_ = (expr);                                                  \
    ASSERT_EQ(pagoda_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(pagoda_err_); \
  } while (0)

// Owns `bytes` of device memory. Not copyable. Aborts the test process on a
// failed allocation (tests size their buffers far below device memory).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

  // Synchronous copies of the whole buffer (or of `host.size()` elements).
  template <typename T>
  void Upload(const std::vector<T>& host) {
    Copy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  template <typename T>
  std::vector<T> Download(size_t count) const {
    std::vector<T> host(count);
    Copy(host.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
  // Fills every byte with `value` (poison before a kernel writes).
  void Fill(uint8_t value);

 private:
  static void Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Host encodings of element types, rounding to nearest even.
std::vector<uint8_t> Encode(ScalarType type, const std::vector<float>& values);
std::vector<float> Decode(ScalarType type, const std::vector<uint8_t>& bytes);
// Rounds each value through `type` and back.
std::vector<float> RoundTrip(ScalarType type, const std::vector<float>& values);

// Relative tolerance of one rounding to `type`, for comparisons with float64
// references (a few units in the last place).
double Tolerance(ScalarType type);

// Uniform floats in [lo, hi) from a seeded std::mt19937.
std::vector<float> RandomFloats(size_t count, float lo, float hi, uint32_t seed);

}  // namespace pagoda::kernels::testing

#endif  // PAGODA_TESTS_KERNELS_CUDA_TEST_UTIL_H_
