// The CUDA FP8 W8A8 linear (kernels/ops/fp8_linear.h around kernels::Gemm's
// E4M3 GEMM: what CudaBackend::Fp8Linear launches) against the bf16 GEMM of
// the same shape, measured in the same run, on Llama-3-8B's projections:
// median microseconds of each, the FP8 GEMM alone, and bf16 / FP8 (the
// speedup, issue 45's FP8 goal), with the weight-read floor of each at the
// device-to-device copy bandwidth (bytes read + written) measured first.
// Plain main; prints a table.
//
//   bench_fp8_linear [--iters N]

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/ops/fp8_linear.h"
#include "kernels/ops/gemm.h"

namespace {

using namespace pagoda::kernels;

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

// A hash of the index: random-looking values without a host upload.
__device__ uint32_t HashIndex(size_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed ^ static_cast<uint32_t>(i >> 32);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  return x;
}

// bf16 in [-1, 1); E4M3 codes with bit 3 cleared (no NaN code).
__global__ void FillBf16(__nv_bfloat16* data, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] =
        __float2bfloat16(static_cast<float>(HashIndex(i, seed)) * (2.0f / 4294967296.0f) - 1.0f);
  }
}
__global__ void FillFp8(uint8_t* data, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = static_cast<uint8_t>(HashIndex(i, seed) & 0xF7u);
  }
}
__global__ void FillConstant(float* data, size_t count, float value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = value;
  }
}

void* Malloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return p;
}

template <typename Work>
float MedianMs(int iters, Work&& work) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) work();
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

struct Projection {
  const char* name;
  int64_t out, in;
};

void BenchShape(GemmContext& gemm, const Projection& shape, int64_t rows, int iters,
                double copy_gbps) {
  const int64_t padded = (rows + 15) / 16 * 16;
  void* x = Malloc(rows * shape.in * 2);
  void* w_bf16 = Malloc(shape.out * shape.in * 2);
  void* w_fp8 = Malloc(shape.out * shape.in);
  void* y = Malloc(rows * shape.out * 2);
  void* codes = Malloc(padded * shape.in);
  void* x_scales = Malloc(rows * 4);
  void* w_scales = Malloc(shape.out * 4);
  void* product = Malloc(padded * shape.out * 4);
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x), rows * shape.in, 1);
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(w_bf16), shape.out * shape.in, 2);
  FillFp8<<<1024, 256>>>(static_cast<uint8_t*>(w_fp8), shape.out * shape.in, 3);
  FillConstant<<<64, 256>>>(static_cast<float*>(w_scales), shape.out, 1e-3f);
  CHECK_CUDA(cudaMemset(codes, 0, padded * shape.in));
  CHECK_CUDA(cudaGetLastError());

  const GemmParams bf16{.a = x, .w = w_bf16, .c = y, .m = rows, .n = shape.out, .k = shape.in};
  const GemmParams fp8{.a = codes,
                       .w = w_fp8,
                       .c = product,
                       .m = padded,
                       .n = shape.out,
                       .k = shape.in,
                       .dtype = ScalarType::kFp8E4M3,
                       .out_dtype = ScalarType::kF32};
  QuantizeFp8RowsParams quantize{.x = x,
                                 .x_row_stride = shape.in,
                                 .rows = rows,
                                 .cols = shape.in,
                                 .codes = static_cast<uint8_t*>(codes),
                                 .scales = static_cast<float*>(x_scales)};
  ScaleFp8OutputParams scale{.acc = static_cast<float*>(product),
                             .row_scales = static_cast<float*>(x_scales),
                             .col_scales = static_cast<float*>(w_scales),
                             .y = y,
                             .y_row_stride = shape.out,
                             .rows = rows,
                             .cols = shape.out};
  const float bf16_ms = MedianMs(iters, [&] { CHECK_CUBLAS(Gemm(gemm, bf16, nullptr)); });
  const float gemm_ms = MedianMs(iters, [&] { CHECK_CUBLAS(Gemm(gemm, fp8, nullptr)); });
  const float fp8_ms = MedianMs(iters, [&] {
    CHECK_CUDA(LaunchQuantizeFp8Rows(quantize, nullptr));
    CHECK_CUBLAS(Gemm(gemm, fp8, nullptr));
    CHECK_CUDA(LaunchScaleFp8Output(scale, nullptr));
  });
  const double floor_bf16_us = 2.0 * shape.out * shape.in / (copy_gbps * 1e9) * 1e6;
  std::printf(
      "%-8s %6ld x %5ld  rows %5ld  bf16 %9.1f us (floor %7.1f)  fp8 %9.1f us "
      "(gemm %9.1f, floor %7.1f)  bf16/fp8 %5.2fx\n",
      shape.name, static_cast<long>(shape.out), static_cast<long>(shape.in),
      static_cast<long>(rows), bf16_ms * 1e3, floor_bf16_us, fp8_ms * 1e3, gemm_ms * 1e3,
      floor_bf16_us / 2, bf16_ms / fp8_ms);
  for (void* p : {x, w_bf16, w_fp8, y, codes, x_scales, w_scales, product}) CHECK_CUDA(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::max(1, std::atoi(argv[i + 1]));
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("bench_fp8_linear: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const size_t copy_bytes = size_t{1} << 30;
  void* src = Malloc(copy_bytes);
  void* dst = Malloc(copy_bytes);
  CHECK_CUDA(cudaMemset(src, 0x3c, copy_bytes));
  const float copy_ms = MedianMs(
      iters, [&] { CHECK_CUDA(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); });
  const double copy_gbps = 2.0 * copy_bytes / (copy_ms * 1e-3) / 1e9;
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
  std::printf("device %s; d2d copy %.0f GB/s (read + write); floors = weight bytes / that\n",
              prop.name, copy_gbps);
  std::unique_ptr<GemmContext> gemm;
  CHECK_CUBLAS(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &gemm));
  const Projection projections[] = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  for (int64_t rows : {1, 64, 256, 4096}) {
    for (const Projection& shape : projections) BenchShape(*gemm, shape, rows, iters, copy_gbps);
  }
  return 0;
}
