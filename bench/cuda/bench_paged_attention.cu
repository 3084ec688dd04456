// Benchmark of the paged attention kernels on the local GPU: decode achieved
// bandwidth (KV bytes read / time) next to a device-to-device copy measured in
// the same run, and prefill TFLOP/s, over a bf16 cache and an FP8 E4M3 one
// (--kv-cache-dtype fp8: half the bytes, so its decode time against bf16's
// is the figure; its GB/s count the FP8 bytes). Plain main; prints a small
// table.
//
//   bench_paged_attention [--iters N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "bench/cuda/bench_cuda_common.cuh"
#include "bench/cuda/kernel_bench_args.h"
#include "kernels/attention/paged_attention.h"

namespace {

using namespace pagoda::kernels;
using pagoda::bench::FillBf16;
using pagoda::bench::FillFp8;
using pagoda::bench::Malloc;
using pagoda::bench::MedianMs;

constexpr int kQHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 128;
constexpr int kBlockSize = 16;

void FillRandom(void* data, size_t elements, uint32_t seed) {
  FillBf16<<<1024, 256>>>(static_cast<__nv_bfloat16*>(data), elements, seed);
  CHECK_CUDA(cudaGetLastError());
}

struct Cache {
  void* k = nullptr;
  void* v = nullptr;
  int num_blocks = 0;
  KvCacheStorage storage = KvCacheStorage::kDType;  // kFp8E4M3: one byte an element
  int element_bytes() const { return storage == KvCacheStorage::kFp8E4M3 ? 1 : 2; }
  const char* name() const { return storage == KvCacheStorage::kFp8E4M3 ? "fp8" : "bf16"; }
};

// Block tables for `batch` sequences of `context` tokens: consecutive slices
// of one random permutation of the physical blocks, or of the blocks in order
// (each sequence's KV contiguous: the baseline paging must not fall behind).
int32_t* MakeBlockTables(int batch, int context, int num_blocks, std::mt19937& rng,
                         int* max_blocks_per_seq, bool shuffled = true) {
  const int blocks = (context + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  if (shuffled) std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(batch) * blocks);
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = pool[i % pool.size()];
  int32_t* device = static_cast<int32_t*>(Malloc(tables.size() * 4));
  CHECK_CUDA(cudaMemcpy(device, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  *max_blocks_per_seq = blocks;
  return device;
}

int32_t* DeviceInts(const std::vector<int32_t>& values) {
  int32_t* device = static_cast<int32_t*>(Malloc(values.size() * 4));
  CHECK_CUDA(cudaMemcpy(device, values.data(), values.size() * 4, cudaMemcpyHostToDevice));
  return device;
}

// The device's peak memory bandwidth, for the planner (set in main).
double peak_memory_gbps = 0;

void BenchDecode(const Cache& cache, int batch, int context, SplitKMode split, int num_sms,
                 int iters, float copy_gbps, std::mt19937& rng, bool shuffled = true,
                 PrefetchMode prefetch = PrefetchMode::kAuto, int partition_size = 512) {
  int max_blocks = 0;
  int32_t* tables = MakeBlockTables(batch, context, cache.num_blocks, rng, &max_blocks, shuffled);
  int32_t* lens = DeviceInts(std::vector<int32_t>(batch, context));
  const size_t q_bytes = static_cast<size_t>(batch) * kQHeads * kHeadDim * 2;
  void* q = Malloc(q_bytes);
  void* out = Malloc(q_bytes);
  FillRandom(q, q_bytes / 2, 7);

  DecodeAttentionParams p;
  p.dtype = ScalarType::kBF16;
  p.num_seqs = batch;
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.block_size = kBlockSize;
  p.max_blocks_per_seq = max_blocks;
  p.softmax_scale = 0.08838834764831845f;
  p.kv_storage = cache.storage;
  p.q = q;
  p.k_cache = cache.k;
  p.v_cache = cache.v;
  p.block_tables = tables;
  p.context_lens = lens;
  p.out = out;
  DecodePlanOptions options;
  options.split_k = split;
  options.prefetch = prefetch;
  options.partition_size = partition_size;
  options.peak_memory_gbps = peak_memory_gbps;
  const DecodePlan plan =
      PlanDecodeAttention(batch, kQHeads, kKvHeads, kHeadDim, context, num_sms, options);
  void* workspace = Malloc(plan.workspace_bytes);
  const float ms =
      MedianMs(3, iters, [&] { CHECK_CUDA(LaunchDecodeAttention(p, plan, workspace, nullptr)); });
  const double kv_bytes = 2.0 * batch * context * kKvHeads * kHeadDim * cache.element_bytes();
  const double gbps = kv_bytes / (ms * 1e-3) / 1e9;
  std::printf(
      "decode %-4s batch %4d ctx %6d  split %-4s parts %3d  %-8s %-10s %9.1f us  %7.1f GB/s  "
      "%5.1f%% of copy\n",
      cache.name(), batch, context, plan.partition_size > 0 ? "yes" : "no", plan.max_num_partitions,
      plan.prefetch ? "prefetch" : "no-pref", shuffled ? "paged" : "contiguous", ms * 1e3, gbps,
      100.0 * gbps / copy_gbps);
  CHECK_CUDA(cudaFree(workspace));
  CHECK_CUDA(cudaFree(q));
  CHECK_CUDA(cudaFree(out));
  CHECK_CUDA(cudaFree(tables));
  CHECK_CUDA(cudaFree(lens));
}

// `queries` new tokens per sequence after a cached prefix of `prefix` tokens,
// through `kernel`. Returns the TFLOP/s.
double BenchPrefill(const Cache& cache, int batch, int queries, int prefix, int iters,
                    std::mt19937& rng, PrefillKernel kernel = PrefillKernel::kMmaSync) {
  const int context = prefix + queries;
  int max_blocks = 0;
  int32_t* tables = MakeBlockTables(batch, context, cache.num_blocks, rng, &max_blocks);
  int32_t* lens = DeviceInts(std::vector<int32_t>(batch, context));
  std::vector<int32_t> starts(batch + 1);
  for (int s = 0; s <= batch; ++s) starts[s] = s * queries;
  int32_t* query_start = DeviceInts(starts);
  const size_t q_bytes = static_cast<size_t>(batch) * queries * kQHeads * kHeadDim * 2;
  void* q = Malloc(q_bytes);
  void* out = Malloc(q_bytes);
  FillRandom(q, q_bytes / 2, 9);

  PrefillAttentionParams p;
  p.dtype = ScalarType::kBF16;
  p.num_seqs = batch;
  p.num_q_heads = kQHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.block_size = kBlockSize;
  p.max_blocks_per_seq = max_blocks;
  p.max_query_len = queries;
  p.softmax_scale = 0.08838834764831845f;
  p.kv_storage = cache.storage;
  p.kernel = kernel;
  p.num_cache_blocks = cache.num_blocks;
  p.q = q;
  p.query_start = query_start;
  p.k_cache = cache.k;
  p.v_cache = cache.v;
  p.block_tables = tables;
  p.context_lens = lens;
  p.out = out;
  const float ms = MedianMs(2, iters, [&] { CHECK_CUDA(LaunchPrefillAttention(p, nullptr)); });
  // Causal: query i sees prefix + i + 1 keys; 2 FLOPs per multiply-add,
  // QK^T and PV.
  const double pairs =
      (static_cast<double>(queries) * prefix + static_cast<double>(queries) * (queries + 1) / 2) *
      batch;
  const double flops = 4.0 * pairs * kQHeads * kHeadDim;
  const double tflops = flops / (ms * 1e-3) / 1e12;
  std::printf(
      "prefill %-4s batch %4d tokens %5d  causal, prefix %5d      %9.1f us  %7.2f TFLOP/s%s\n",
      cache.name(), batch, queries, prefix, ms * 1e3, tflops,
      kernel == PrefillKernel::kWgmma ? "  wgmma" : "");
  CHECK_CUDA(cudaFree(q));
  CHECK_CUDA(cudaFree(out));
  CHECK_CUDA(cudaFree(tables));
  CHECK_CUDA(cudaFree(lens));
  CHECK_CUDA(cudaFree(query_start));
  return tflops;
}

// The Hopper prefill kernel beside mma.sync, same run, causal, head 128:
// one "prefill wgmma" row per length with both figures and their ratio
// (issue 49's goal: >= 400 TFLOP/s at 2k, >= 450 at 8k on an H100).
void BenchPrefillKernels(const Cache& cache, int iters, std::mt19937& rng) {
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  if (!PrefillKernelRunsOnDevice(PrefillKernel::kWgmma, device, cache.storage)) {
    std::printf("prefill wgmma: skipped (needs compute capability 9.0)\n");
    return;
  }
  for (int prefix : {0, 4096}) {
    for (int queries : {2048, 4096, 8192}) {
      const double sync = BenchPrefill(cache, 1, queries, prefix, iters, rng);
      const double wgmma =
          BenchPrefill(cache, 1, queries, prefix, iters, rng, PrefillKernel::kWgmma);
      std::printf(
          "prefill wgmma tokens %5d prefix %5d: mma.sync %7.2f  wgmma %7.2f TFLOP/s  "
          "ratio %.2fx\n",
          queries, prefix, sync, wgmma, wgmma / sync);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 30;
  pagoda::bench::ParseKernelBenchArgs(argc, argv, "bench_paged_attention [--iters N]",
                                      {{"iters", &iters, 1, 100000}});
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("bench_paged_attention: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const int num_sms = prop.multiProcessorCount;
  int memory_clock_khz = 0;
  int bus_width_bits = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, 0));
  peak_memory_gbps = PeakMemoryGbps(memory_clock_khz, bus_width_bits);
  std::printf("device %s, %d SMs, L2 %d MB, peak memory %.0f GB/s\n", prop.name, num_sms,
              prop.l2CacheSize >> 20, peak_memory_gbps);

  // Device-to-device copy ceiling: bytes read + bytes written.
  const float copy_gbps = static_cast<float>(pagoda::bench::CopyGbps(iters));
  std::printf("memcpy d2d 1 GiB: %.1f GB/s (read + write)\n", copy_gbps);

  // One cache big enough for the largest case (256 x 4k tokens): 2 x 2 GiB.
  Cache cache;
  cache.num_blocks = 256 * 4096 / kBlockSize;
  const size_t cache_elements =
      static_cast<size_t>(cache.num_blocks) * kKvHeads * kBlockSize * kHeadDim;
  cache.k = Malloc(cache_elements * 2);
  cache.v = Malloc(cache_elements * 2);
  FillRandom(cache.k, cache_elements, 3);
  FillRandom(cache.v, cache_elements, 5);
  CHECK_CUDA(cudaDeviceSynchronize());

  std::mt19937 rng(42);
  std::printf("bf16, %d q heads / %d kv heads, head_dim %d, block %d\n", kQHeads, kKvHeads,
              kHeadDim, kBlockSize);
  for (int batch : {64, 256}) {
    for (int context : {1024, 4096}) {
      BenchDecode(cache, batch, context, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng);
      BenchDecode(cache, batch, context, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng,
                  /*shuffled=*/false);
      BenchDecode(cache, batch, context, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng,
                  /*shuffled=*/true, PrefetchMode::kNever);
      BenchDecode(cache, batch, context, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng,
                  /*shuffled=*/true, PrefetchMode::kAlways);
    }
  }
  BenchDecode(cache, 1, 32768, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng);
  BenchDecode(cache, 1, 32768, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng, true,
              PrefetchMode::kAlways);
  BenchDecode(cache, 1, 32768, SplitKMode::kNever, num_sms, iters, copy_gbps, rng);
  // Longer and shorter partitions than the planner's 512 for one long context.
  for (int partition_size : {1024, 256}) {
    BenchDecode(cache, 1, 32768, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng, true,
                PrefetchMode::kNever, partition_size);
  }
  const int prefill_iters = std::max(3, iters / 5);
  for (int queries : {2048, 8192}) {
    for (int prefix : {0, 4096}) BenchPrefill(cache, 1, queries, prefix, prefill_iters, rng);
  }
  BenchPrefill(cache, 4, 4096, 0, prefill_iters, rng);

  // The same shapes over an FP8 E4M3 cache (kernels' FP8 paths): compare
  // each row's time with the bf16 row above.
  Cache fp8 = cache;
  fp8.storage = KvCacheStorage::kFp8E4M3;
  fp8.k = Malloc(cache_elements);
  fp8.v = Malloc(cache_elements);
  FillFp8<<<1024, 256>>>(static_cast<uint8_t*>(fp8.k), cache_elements, 3);
  FillFp8<<<1024, 256>>>(static_cast<uint8_t*>(fp8.v), cache_elements, 5);
  CHECK_CUDA(cudaDeviceSynchronize());
  for (int batch : {64, 256}) {
    for (int context : {1024, 4096}) {
      BenchDecode(fp8, batch, context, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng);
    }
  }
  BenchDecode(fp8, 1, 32768, SplitKMode::kAuto, num_sms, iters, copy_gbps, rng);
  for (int queries : {2048, 8192}) BenchPrefill(fp8, 1, queries, 0, prefill_iters, rng);
  CHECK_CUDA(cudaFree(fp8.k));
  CHECK_CUDA(cudaFree(fp8.v));

  // Last, so that a failing wgmma kernel (it traps rather than hang) costs
  // no other row.
  BenchPrefillKernels(cache, prefill_iters, rng);
  CHECK_CUDA(cudaFree(cache.k));
  CHECK_CUDA(cudaFree(cache.v));
  return 0;
}
