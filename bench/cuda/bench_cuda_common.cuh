#ifndef PAGODA_BENCH_CUDA_BENCH_CUDA_COMMON_CUH_
#define PAGODA_BENCH_CUDA_BENCH_CUDA_COMMON_CUH_

// What every CUDA benchmark program needs: exit-on-error checks, random-
// looking device data made on the device (no host upload; never zeros), a
// malloc that checks, and the median of event-timed runs. Each benchmark is
// one translation unit of its own, so the kernels here are static.

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK_CUDA(call)                                                \
  do {                                                                  \
    cudaError_t error_ = (call);                                        \
    if (error_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(error_));                         \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

#define CHECK_CUBLAS(call)                                              \
  do {                                                                  \
    cublasStatus_t status_ = (call);                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, \
                   cublasLtGetStatusName(status_));                     \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

namespace pagoda::bench {

// A hash of the index and a seed: random-looking 32-bit words.
static __device__ uint32_t HashIndex(size_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Uniform bf16 values in [-1, 1).
static __global__ void FillBf16(__nv_bfloat16* data, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] =
        __float2bfloat16(static_cast<float>(HashIndex(i, seed)) * (2.0f / 4294967296.0f) - 1.0f);
  }
}

// FP8 E4M3 codes with bit 3 cleared, so that no exponent is all ones (no
// NaN code): magnitudes up to 240.
static __global__ void FillFp8(uint8_t* data, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = static_cast<uint8_t>(HashIndex(i, seed) & 0xF7u);
  }
}

// cudaMalloc of at least 256 bytes (an empty buffer still gets an address),
// exiting on failure.
inline void* Malloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return p;
}

// Median milliseconds of `iters` event-timed runs of `work` after `warmup`
// untimed ones.
template <typename Work>
float MedianMs(int warmup, int iters, Work&& work) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < warmup; ++i) work();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> times;
  for (int i = 0; i < iters; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    work();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The device's copy bandwidth, read plus write, in GB/s: the median of
// `iters` 1 GiB device-to-device copies, the ceiling the benchmarks' floors
// are measured against.
inline double CopyGbps(int iters) {
  const size_t bytes = size_t{1} << 30;
  void* src = Malloc(bytes);
  void* dst = Malloc(bytes);
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(src), bytes / 2, 1);
  CHECK_CUDA(cudaGetLastError());
  const float ms = MedianMs(
      3, iters, [&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

}  // namespace pagoda::bench

#endif  // PAGODA_BENCH_CUDA_BENCH_CUDA_COMMON_CUH_
