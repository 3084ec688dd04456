// The CUDA weight-only int4 linear (kernels/ops/int_linear.h: what
// CudaBackend::IntLinear launches: the GEMV up to kIntGemvMaxRows rows, the
// dequantized weight and the bf16 GEMM above) against the bf16 GEMM of the
// same shape, measured in the same run, on Llama-3-8B's projections with
// group-128 scales: median microseconds of each, the int4 path's
// weight-read floor (packed codes + (scale, zero) pairs at the
// device-to-device copy bandwidth measured first, as bench_fp8_linear's
// floors), int4 / floor (issue 45's goal: a batch-1 decode step <= 1.3x its
// floor) and bf16 / int4; then the "step" row: the linears of a whole
// Llama-3.1-8B batch-1 decode step (32 layers of int4 GEMVs and the bf16
// lm_head) replayed from a CUDA graph against their read floor. Rows past
// the GEMV also time the fused int4 GEMM (LaunchFusedIntGemm, "fused":
// int4/fused > 1 means it beats dequantize + GEMM). Plain main; prints a
// table.
//
//   bench_int4_linear [--iters N]

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
#include "kernels/ops/gemm.h"
#include "kernels/ops/int_linear.h"

namespace {

using namespace pagoda::kernels;
using pagoda::bench::FillBf16;
using pagoda::bench::HashIndex;
using pagoda::bench::Malloc;
using pagoda::bench::MedianMs;

__global__ void FillWords(uint32_t* data, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = HashIndex(i, seed);
  }
}
__global__ void FillScaleZero(float2* data, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] = make_float2(1e-3f, 8.0f);
  }
}

struct Projection {
  const char* name;
  int64_t out, in;
};

constexpr int64_t kGroupSize = 128;

void BenchShape(GemmContext& gemm, const Projection& shape, int64_t rows, int iters,
                double copy_gbps) {
  PackedIntWeight w{.bits = 4,
                    .out = shape.out,
                    .in = shape.in,
                    .words_per_row = (shape.in + 31) / 32 * 4,
                    .group_size = kGroupSize,
                    .runs = (shape.in + kGroupSize - 1) / kGroupSize};
  const size_t code_bytes = w.out * w.words_per_row * 4;
  const size_t pair_bytes = w.out * w.runs * sizeof(float2);
  void* codes = Malloc(code_bytes);
  void* pairs = Malloc(pair_bytes);
  void* x = Malloc(rows * shape.in * 2);
  void* w_bf16 = Malloc(shape.out * shape.in * 2);
  void* y = Malloc(rows * shape.out * 2);
  FillWords<<<1024, 256>>>(static_cast<uint32_t*>(codes), code_bytes / 4, 1);
  FillScaleZero<<<256, 256>>>(static_cast<float2*>(pairs), w.out * w.runs);
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x), rows * shape.in, 2);
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(w_bf16), shape.out * shape.in, 3);
  CHECK_CUDA(cudaGetLastError());
  w.codes = static_cast<const uint32_t*>(codes);
  w.scale_zero = static_cast<const float2*>(pairs);

  const GemmParams bf16{.a = x, .w = w_bf16, .c = y, .m = rows, .n = shape.out, .k = shape.in};
  const float bf16_ms = MedianMs(3, iters, [&] { CHECK_CUBLAS(Gemm(gemm, bf16, nullptr)); });
  const float int4_ms = MedianMs(3, iters, [&] {
    if (rows <= kIntGemvMaxRows) {
      CHECK_CUDA(LaunchIntGemv(IntGemvParams{.weight = w,
                                             .x = x,
                                             .y = y,
                                             .dtype = ScalarType::kBF16,
                                             .rows = static_cast<int>(rows)},
                               nullptr));
    } else {
      CHECK_CUDA(LaunchDequantizeIntWeight(w, ScalarType::kBF16, w_bf16, nullptr));
      CHECK_CUBLAS(Gemm(gemm, bf16, nullptr));
    }
  });
  // Past the GEMV: the fused GEMM (dequantized in registers into mma.sync),
  // not yet on the serving path, against the dequantize + GEMM above.
  const IntGemmParams fused{.weight = w, .x = x, .y = y, .dtype = ScalarType::kBF16, .rows = rows};
  const float fused_ms = rows <= kIntGemvMaxRows ? 0.0f : MedianMs(3, iters, [&] {
    CHECK_CUDA(LaunchFusedIntGemm(fused, nullptr));
  });
  const double floor_us = (code_bytes + pair_bytes) / (copy_gbps * 1e9) * 1e6;
  std::printf(
      "%-8s %6ld x %5ld  rows %5ld  int4 %9.1f us (floor %7.1f, %5.2fx)  bf16 %9.1f us  "
      "bf16/int4 %5.2fx  fused %9.1f us  int4/fused %5.2fx\n",
      shape.name, static_cast<long>(shape.out), static_cast<long>(shape.in),
      static_cast<long>(rows), int4_ms * 1e3, floor_us, int4_ms * 1e3 / floor_us, bf16_ms * 1e3,
      bf16_ms / int4_ms, fused_ms * 1e3, fused_ms > 0 ? int4_ms / fused_ms : 0.0f);
  for (void* p : {codes, pairs, x, w_bf16, y}) CHECK_CUDA(cudaFree(p));
}

// The linears of a Llama-3.1-8B decode step at batch 1 as the CUDA graph
// replays them: 32 layers of int4 g128 qkv, o, gate_up and down GEMVs, each
// layer its own weights (3.9 GB packed: nothing stays in L2), then the bf16
// lm_head (128256 x 4096, unquantized as AWQ/GPTQ checkpoints keep it),
// captured once and replayed; against the read floor of those bytes.
// Attention, norms and the rest of the step are not in it (a few percent
// of a batch-1 step's bytes at short contexts).
void BenchDecodeStep(GemmContext& gemm, const Projection (&projections)[4], int iters,
                     double copy_gbps) {
  constexpr int kLayers = 32;
  constexpr int64_t kHidden = 4096, kVocab = 128256;
  std::vector<PackedIntWeight> weights;
  std::vector<void*> buffers;
  size_t floor_bytes = 0;
  for (int layer = 0; layer < kLayers; ++layer) {
    for (const Projection& shape : projections) {
      PackedIntWeight w{.bits = 4,
                        .out = shape.out,
                        .in = shape.in,
                        .words_per_row = (shape.in + 31) / 32 * 4,
                        .group_size = kGroupSize,
                        .runs = (shape.in + kGroupSize - 1) / kGroupSize};
      const size_t code_bytes = w.out * w.words_per_row * 4;
      const size_t pair_bytes = w.out * w.runs * sizeof(float2);
      void* codes = Malloc(code_bytes);
      void* pairs = Malloc(pair_bytes);
      FillWords<<<1024, 256>>>(static_cast<uint32_t*>(codes), code_bytes / 4, 10 + layer);
      FillScaleZero<<<256, 256>>>(static_cast<float2*>(pairs), w.out * w.runs);
      w.codes = static_cast<const uint32_t*>(codes);
      w.scale_zero = static_cast<const float2*>(pairs);
      weights.push_back(w);
      buffers.push_back(codes);
      buffers.push_back(pairs);
      floor_bytes += code_bytes + pair_bytes;
    }
  }
  void* x = Malloc(14336 * 2);  // the widest input (down's)
  void* y = Malloc(28672 * 2);  // the widest output (gate_up's)
  void* lm_head = Malloc(kVocab * kHidden * 2);
  void* logits = Malloc(kVocab * 2);
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(x), 14336, 4);
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(lm_head), kVocab * kHidden, 5);
  CHECK_CUDA(cudaGetLastError());
  floor_bytes += kVocab * kHidden * 2;
  const GemmParams head{.a = x, .w = lm_head, .c = logits, .m = 1, .n = kVocab, .k = kHidden};
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));  // blocking: MedianMs's default-stream events order it
  auto step = [&] {
    for (const PackedIntWeight& w : weights) {
      CHECK_CUDA(LaunchIntGemv(
          IntGemvParams{.weight = w, .x = x, .y = y, .dtype = ScalarType::kBF16, .rows = 1},
          stream));
    }
    CHECK_CUBLAS(Gemm(gemm, head, stream));
  };
  step();  // picks the lm_head's algorithm outside the capture
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const float eager_ms = MedianMs(2, iters, [&] {
    step();
    CHECK_CUDA(cudaStreamSynchronize(stream));
  });
  const float graph_ms = MedianMs(2, iters, [&] { CHECK_CUDA(cudaGraphLaunch(exec, nullptr)); });
  const double floor_us = floor_bytes / (copy_gbps * 1e9) * 1e6;
  std::printf(
      "step     8B int4 g128 linears + bf16 lm_head, batch 1: graph %9.1f us (floor %7.1f, "
      "%5.2fx; goal <= 1.30x)  eager %9.1f us  %.2f GB read\n",
      graph_ms * 1e3, floor_us, graph_ms * 1e3 / floor_us, eager_ms * 1e3, floor_bytes / 1e9);
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaStreamDestroy(stream));
  for (void* p : buffers) CHECK_CUDA(cudaFree(p));
  for (void* p : {x, y, lm_head, logits}) CHECK_CUDA(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  pagoda::bench::ParseKernelBenchArgs(argc, argv, "bench_int4_linear [--iters N]",
                                      {{"iters", &iters, 1, 100000}});
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("bench_int4_linear: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbps = pagoda::bench::CopyGbps(iters);
  std::printf("device %s; d2d copy %.0f GB/s (read + write); floor = packed weight bytes / that\n",
              prop.name, copy_gbps);
  std::unique_ptr<GemmContext> gemm;
  CHECK_CUBLAS(GemmContext::Create(GemmContext::kDefaultWorkspaceBytes, &gemm));
  const Projection projections[] = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  for (int64_t rows : {1, 2, 4, 8, 16, 32, 64, 4096}) {
    for (const Projection& shape : projections) BenchShape(*gemm, shape, rows, iters, copy_gbps);
  }
  BenchDecodeStep(*gemm, projections, iters, copy_gbps);
  return 0;
}
