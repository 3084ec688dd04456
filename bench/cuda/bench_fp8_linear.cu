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

#include "bench/cuda/bench_cuda_common.cuh"
#include "kernels/ops/fp8_linear.h"
#include "kernels/ops/gemm.h"

namespace {

using namespace pagoda::kernels;
using pagoda::bench::FillBf16;
using pagoda::bench::FillFp8;
using pagoda::bench::HashIndex;
using pagoda::bench::Malloc;
using pagoda::bench::MedianMs;

__global__ void FillConstant(float* data, size_t count, float value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = value;
  }
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
  const float bf16_ms = MedianMs(3, iters, [&] { CHECK_CUBLAS(Gemm(gemm, bf16, nullptr)); });
  const float gemm_ms = MedianMs(3, iters, [&] { CHECK_CUBLAS(Gemm(gemm, fp8, nullptr)); });
  const float fp8_ms = MedianMs(3, iters, [&] {
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
  const double copy_gbps = pagoda::bench::CopyGbps(iters);
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
