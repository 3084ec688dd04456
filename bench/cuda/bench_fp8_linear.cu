// The CUDA FP8 W8A8 linear (kernels/ops/fp8_linear.h around kernels::Gemm's
// E4M3 GEMM: what CudaBackend::Fp8Linear launches) against the bf16 GEMM of
// the same shape, measured in the same run, on Llama-3-8B's projections:
// median microseconds of each, the FP8 GEMM alone, and bf16 / FP8 (the
// speedup, issue 45's FP8 goal), with the weight-read floor of each at the
// device-to-device copy bandwidth (bytes read + written) measured first;
// then "fused": the quantization and cuBLASLt's E4M3 GEMM with both scales
// in its descriptor writing bf16 (kernels/ops/scaled_gemm.h), no f32 pass
// (0.0 us, 0.00x when cuBLASLt declines it); and "int8": W8A8 int8 on the
// tensor cores (int8 codes, cuBLASLt's int8 GEMM, the int32 epilogue:
// kernels/ops/w8a8_int8.h). Plain main; prints a table.
//
//   bench_fp8_linear [--iters N]

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "bench/cuda/bench_cuda_common.cuh"
#include "bench/cuda/kernel_bench_args.h"
#include "kernels/ops/fp8_linear.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/scaled_gemm.h"
#include "kernels/ops/w8a8_int8.h"

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
  void* x_scales = Malloc(padded * 4);
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
  // The scales inside cuBLASLt, bf16 out (scaled_gemm.h: CudaBackend's path
  // for bias-free linears), into the padded product buffer.
  const Fp8ScaledGemmParams scaled{.a = static_cast<uint8_t*>(codes),
                                   .w = static_cast<uint8_t*>(w_fp8),
                                   .row_scales = static_cast<float*>(x_scales),
                                   .col_scales = static_cast<float*>(w_scales),
                                   .c = product,
                                   .m = padded,
                                   .n = shape.out,
                                   .k = shape.in};
  CHECK_CUDA(cudaMemset(x_scales, 0, padded * 4));
  const bool fused = Fp8ScaledGemm(gemm, scaled, nullptr) == CUBLAS_STATUS_SUCCESS;
  const float fused_ms = !fused ? 0.0f : MedianMs(3, iters, [&] {
    CHECK_CUDA(LaunchQuantizeFp8Rows(quantize, nullptr));
    CHECK_CUBLAS(Fp8ScaledGemm(gemm, scaled, nullptr));
  });
  // W8A8 int8 on the tensor cores (kernels/ops/w8a8_int8.h around
  // Int8Gemm: CudaBackend's path for an 8-bit W8A8 weight), the FP8
  // weight's bytes read as int8 values.
  void* row_sums = Malloc(padded * 4);
  void* scale_zero = Malloc(shape.out * 8);
  CHECK_CUDA(cudaMemset(scale_zero, 0, shape.out * 8));
  const QuantizeInt8CodesParams int8_codes{.x = x,
                                           .rows = rows,
                                           .cols = shape.in,
                                           .codes = static_cast<int8_t*>(codes),
                                           .ld = shape.in,
                                           .padded_rows = padded,
                                           .scales = static_cast<float*>(x_scales),
                                           .row_sums = static_cast<int32_t*>(row_sums)};
  const Int8GemmParams int8_product{.a = static_cast<int8_t*>(codes),
                                    .w = static_cast<int8_t*>(w_fp8),
                                    .c = static_cast<int32_t*>(product),
                                    .m = padded,
                                    .n = shape.out,
                                    .k = shape.in};
  ScaleInt32OutputParams int8_scale;
  int8_scale.acc = static_cast<int32_t*>(product);
  int8_scale.row_sums = static_cast<int32_t*>(row_sums);
  int8_scale.row_scales = static_cast<float*>(x_scales);
  int8_scale.col_scale_zero = static_cast<float2*>(scale_zero);
  int8_scale.col_scales = static_cast<float*>(w_scales);
  int8_scale.y = y;
  int8_scale.y_row_stride = shape.out;
  int8_scale.rows = rows;
  int8_scale.cols = shape.out;
  const bool int8 = Int8Gemm(gemm, int8_product, nullptr) == CUBLAS_STATUS_SUCCESS;
  const float int8_ms = !int8 ? 0.0f : MedianMs(3, iters, [&] {
    CHECK_CUDA(LaunchQuantizeInt8Codes(int8_codes, nullptr));
    CHECK_CUBLAS(Int8Gemm(gemm, int8_product, nullptr));
    CHECK_CUDA(LaunchScaleInt32Output(int8_scale, nullptr));
  });
  const double floor_bf16_us = 2.0 * shape.out * shape.in / (copy_gbps * 1e9) * 1e6;
  std::printf(
      "%-8s %6ld x %5ld  rows %5ld  bf16 %9.1f us (floor %7.1f)  fp8 %9.1f us "
      "(gemm %9.1f, floor %7.1f)  bf16/fp8 %5.2fx  fused %9.1f us  bf16/fused %5.2fx  "
      "int8 %9.1f us  bf16/int8 %5.2fx\n",
      shape.name, static_cast<long>(shape.out), static_cast<long>(shape.in),
      static_cast<long>(rows), bf16_ms * 1e3, floor_bf16_us, fp8_ms * 1e3, gemm_ms * 1e3,
      floor_bf16_us / 2, bf16_ms / fp8_ms, fused_ms * 1e3, fused ? bf16_ms / fused_ms : 0.0f,
      int8_ms * 1e3, int8 ? bf16_ms / int8_ms : 0.0f);
  for (void* p : {x, w_bf16, w_fp8, y, codes, x_scales, w_scales, product, row_sums, scale_zero}) {
    CHECK_CUDA(cudaFree(p));
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  pagoda::bench::ParseKernelBenchArgs(argc, argv, "bench_fp8_linear [--iters N]",
                                      {{"iters", &iters, 1, 100000}});
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
