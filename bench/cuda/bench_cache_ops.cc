// Bandwidth of the cache moves against the plain copies they should approach:
//   swap (coalesced runs and scattered blocks) vs one pinned cudaMemcpyAsync
//   of the same bytes, both directions;
//   copy_blocks vs one device-to-device cudaMemcpyAsync of the same bytes;
//   the decode step's rotary + cache write of one layer (Llama-3-8B: 32 q /
//   8 kv heads of 128, bf16) as two launches vs the fused one
//   (rope_cache_write.h), at 1, 64 and 256 tokens: "of base" is the two
//   launches' time over the fused one's (bytes: what the fused one moves).
// Prints a table. Usage: bench_cache_ops [--layers 8] [--blocks 1024] (blocks
// per layer), or those by position: bench_cache_ops 8 1024

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "bench/cuda/kernel_bench_args.h"
#include "kernels/ops/cache_ops.h"
#include "kernels/ops/rope_cache_write.h"
#include "kernels/ops/rotary_embedding.h"
#include "kernels/ops/swap_blocks.h"

namespace pagoda::kernels {
namespace {

#define CHECK_CUDA(expr)                                                                           \
  do {                                                                                             \
    const cudaError_t err_ = (expr);                                                               \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

// Median milliseconds of `body` over `reps` runs after 2 warm-ups.
template <typename Body>
float MedianMs(cudaStream_t stream, int reps, Body&& body) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 2; ++i) body();
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    body();
    CHECK_CUDA(cudaEventRecord(stop, stream));
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

void Row(const char* name, double bytes, float ms, float baseline_ms) {
  std::printf("%-34s %10.1f MB %9.3f ms %8.1f GB/s %7.1f%%\n", name, bytes / 1e6, ms,
              bytes / ms / 1e6, 100.0 * baseline_ms / ms);
}

// K and V of every layer, tensor_bytes each, on the device and in pinned
// host memory, filled with non-zero bytes.
struct BenchCaches {
  int num_layers = 0;
  int64_t block_bytes = 0;
  int64_t tensor_bytes = 0;
  std::vector<void*> gpu, cpu;  // [2 * num_layers]: layer l's K at 2l, V at 2l + 1.
  std::vector<void*> gpu_k, gpu_v, cpu_k, cpu_v;  // [num_layers]
};

BenchCaches AllocateCaches(int num_layers, int num_blocks, int64_t block_bytes) {
  BenchCaches caches;
  caches.num_layers = num_layers;
  caches.block_bytes = block_bytes;
  caches.tensor_bytes = block_bytes * num_blocks;
  caches.gpu.resize(2 * num_layers);
  caches.cpu.resize(2 * num_layers);
  for (int i = 0; i < 2 * num_layers; ++i) {
    CHECK_CUDA(cudaMalloc(&caches.gpu[i], caches.tensor_bytes));
    CHECK_CUDA(cudaHostAlloc(&caches.cpu[i], caches.tensor_bytes, cudaHostAllocDefault));
    CHECK_CUDA(cudaMemset(caches.gpu[i], i + 1, caches.tensor_bytes));  // not zeros
    std::fill_n(static_cast<char*>(caches.cpu[i]), caches.tensor_bytes, static_cast<char>(i + 3));
  }
  for (int l = 0; l < num_layers; ++l) {
    caches.gpu_k.push_back(caches.gpu[2 * l]);
    caches.gpu_v.push_back(caches.gpu[2 * l + 1]);
    caches.cpu_k.push_back(caches.cpu[2 * l]);
    caches.cpu_v.push_back(caches.cpu[2 * l + 1]);
  }
  return caches;
}

void FreeCaches(const BenchCaches& caches) {
  for (int i = 0; i < 2 * caches.num_layers; ++i) {
    CHECK_CUDA(cudaFree(caches.gpu[i]));
    CHECK_CUDA(cudaFreeHost(caches.cpu[i]));
  }
}

// Swap out and in of every block, in consecutive runs and scattered, against
// plain pinned copies of the same bytes.
void BenchSwap(const BenchCaches& caches, const std::vector<BlockPair>& runs,
               const std::vector<BlockPair>& scattered, cudaStream_t stream, int reps) {
  const int num_layers = caches.num_layers;
  const double swap_bytes = 2.0 * num_layers * caches.tensor_bytes;
  for (const cudaMemcpyKind kind : {cudaMemcpyDeviceToHost, cudaMemcpyHostToDevice}) {
    const bool out = kind == cudaMemcpyDeviceToHost;
    const float base = MedianMs(stream, reps, [&] {
      for (int i = 0; i < 2 * num_layers; ++i) {
        CHECK_CUDA(cudaMemcpyAsync(out ? caches.cpu[i] : caches.gpu[i],
                                   out ? caches.gpu[i] : caches.cpu[i], caches.tensor_bytes, kind,
                                   stream));
      }
    });
    SwapBlocksParams p;
    p.src_key_caches = out ? caches.gpu_k.data() : caches.cpu_k.data();
    p.src_value_caches = out ? caches.gpu_v.data() : caches.cpu_v.data();
    p.dst_key_caches = out ? caches.cpu_k.data() : caches.gpu_k.data();
    p.dst_value_caches = out ? caches.cpu_v.data() : caches.gpu_v.data();
    p.num_layers = num_layers;
    p.block_bytes = caches.block_bytes;
    p.kind = kind;
    const float coalesced =
        MedianMs(stream, reps, [&] { CHECK_CUDA(SwapBlocks(p, runs, stream)); });
    const float scatter =
        MedianMs(stream, reps, [&] { CHECK_CUDA(SwapBlocks(p, scattered, stream)); });
    Row(out ? "plain cudaMemcpy D2H (baseline)" : "plain cudaMemcpy H2D (baseline)", swap_bytes,
        base, base);
    Row(out ? "swap out, consecutive blocks" : "swap in, consecutive blocks", swap_bytes, coalesced,
        base);
    Row(out ? "swap out, scattered blocks" : "swap in, scattered blocks", swap_bytes, scatter,
        base);
  }
}

// copy_blocks: half the blocks (`perm`'s first half) copied onto the other
// half, every layer, against plain device-to-device copies of the same bytes.
void BenchCopyBlocks(const BenchCaches& caches, const std::vector<int64_t>& perm,
                     cudaStream_t stream, int reps) {
  const int num_layers = caches.num_layers;
  const int num_blocks = static_cast<int>(perm.size());
  const int num_pairs = num_blocks / 2;
  std::vector<int64_t> pairs;
  for (int i = 0; i < num_pairs; ++i) {
    pairs.push_back(perm[i]);
    pairs.push_back(perm[num_blocks - 1 - i]);
  }
  void **d_keys, **d_values;
  int64_t* d_pairs;
  CHECK_CUDA(cudaMalloc(&d_keys, num_layers * sizeof(void*)));
  CHECK_CUDA(cudaMalloc(&d_values, num_layers * sizeof(void*)));
  CHECK_CUDA(cudaMalloc(&d_pairs, pairs.size() * sizeof(int64_t)));
  CHECK_CUDA(
      cudaMemcpy(d_keys, caches.gpu_k.data(), num_layers * sizeof(void*), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_values, caches.gpu_v.data(), num_layers * sizeof(void*),
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(
      cudaMemcpy(d_pairs, pairs.data(), pairs.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  const CopyBlocksParams cp{d_keys, d_values, d_pairs, num_layers, num_pairs, caches.block_bytes};
  const int64_t half = caches.block_bytes * num_pairs;
  // Read + write, as device bandwidth is usually counted.
  const double copy_bytes = 2.0 * 2 * num_layers * half;
  const float base = MedianMs(stream, reps, [&] {
    for (int i = 0; i < 2 * num_layers; ++i) {
      CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(caches.gpu[i]) + half, caches.gpu[i], half,
                                 cudaMemcpyDeviceToDevice, stream));
    }
  });
  const float kernel = MedianMs(stream, reps, [&] { CHECK_CUDA(LaunchCopyBlocks(cp, stream)); });
  Row("plain cudaMemcpy D2D (baseline)", copy_bytes, base, base);
  Row("copy_blocks, one launch", copy_bytes, kernel, base);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaFree(d_keys));
  CHECK_CUDA(cudaFree(d_values));
  CHECK_CUDA(cudaFree(d_pairs));
}

// One layer's rotary + cache write for `tokens` decode tokens, two launches
// against the fused one, on a fused QKV buffer and a 4096-slot cache.
void BenchRopeCacheWrite(int tokens, cudaStream_t stream, int reps) {
  constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kSlots = 4096, kPositions = 8192;
  const int64_t row = (kHeads + 2 * kKvHeads) * kHeadDim;  // elements
  void *qkv, *key_cache, *value_cache, *cos_sin, *positions, *slots;
  CHECK_CUDA(cudaMalloc(&qkv, tokens * row * 2));
  CHECK_CUDA(cudaMalloc(&key_cache, int64_t{kSlots} * kKvHeads * kHeadDim * 2));
  CHECK_CUDA(cudaMalloc(&value_cache, int64_t{kSlots} * kKvHeads * kHeadDim * 2));
  CHECK_CUDA(cudaMalloc(&cos_sin, int64_t{kPositions} * kHeadDim * 4));
  CHECK_CUDA(cudaMalloc(&positions, tokens * 8));
  CHECK_CUDA(cudaMalloc(&slots, tokens * 8));
  CHECK_CUDA(cudaMemset(qkv, 0x3c, tokens * row * 2));
  CHECK_CUDA(cudaMemset(cos_sin, 0x3e, int64_t{kPositions} * kHeadDim * 4));
  std::vector<int64_t> host(tokens);
  for (int t = 0; t < tokens; ++t) host[t] = (t * 997) % kPositions;
  CHECK_CUDA(cudaMemcpy(positions, host.data(), tokens * 8, cudaMemcpyHostToDevice));
  for (int t = 0; t < tokens; ++t) host[t] = (t * 131) % kSlots;
  CHECK_CUDA(cudaMemcpy(slots, host.data(), tokens * 8, cudaMemcpyHostToDevice));
  char* k = static_cast<char*>(qkv) + kHeads * kHeadDim * 2;
  char* v = k + kKvHeads * kHeadDim * 2;
  const RotaryEmbeddingParams rope{static_cast<int64_t*>(positions),
                                   qkv,
                                   row,
                                   k,
                                   row,
                                   static_cast<float*>(cos_sin),
                                   tokens,
                                   kHeads,
                                   kKvHeads,
                                   kHeadDim,
                                   kHeadDim,
                                   ScalarType::kBF16};
  ReshapeAndCacheParams write;
  write.key = k;
  write.value = v;
  write.key_token_stride = write.value_token_stride = row;
  write.key_cache = key_cache;
  write.value_cache = value_cache;
  write.slot_mapping = static_cast<int64_t*>(slots);
  write.num_tokens = tokens;
  write.num_kv_heads = kKvHeads;
  write.head_dim = kHeadDim;
  write.block_size = 16;
  RopeCacheWriteParams fused;
  fused.positions = rope.positions;
  fused.query = qkv;
  fused.query_token_stride = fused.key_token_stride = fused.value_token_stride = row;
  fused.key = k;
  fused.value = v;
  fused.cos_sin_cache = rope.cos_sin_cache;
  fused.key_cache = key_cache;
  fused.value_cache = value_cache;
  fused.slot_mapping = write.slot_mapping;
  fused.num_tokens = tokens;
  fused.num_heads = kHeads;
  fused.num_kv_heads = kKvHeads;
  fused.head_dim = fused.rotary_dim = kHeadDim;
  fused.block_size = 16;
  const float separate = MedianMs(stream, reps, [&] {
    CHECK_CUDA(LaunchRotaryEmbedding(rope, stream));
    CHECK_CUDA(LaunchReshapeAndCache(write, stream));
  });
  const float one =
      MedianMs(stream, reps, [&] { CHECK_CUDA(LaunchRopeCacheWrite(fused, stream)); });
  // q read + written, k and v read and written to the cache.
  const double bytes = static_cast<double>(tokens) * (2 * kHeads + 4 * kKvHeads) * kHeadDim * 2;
  char name[64];
  std::snprintf(name, sizeof(name), "rotary + cache write x%d (2 launches)", tokens);
  Row(name, bytes, separate, separate);
  std::snprintf(name, sizeof(name), "rope_cache_write x%d (fused)", tokens);
  Row(name, bytes, one, separate);
  for (void* p : {qkv, key_cache, value_cache, cos_sin, positions, slots}) CHECK_CUDA(cudaFree(p));
}

int Main(int argc, char** argv) {
  int num_layers = 8;
  int num_blocks = 1024;
  bench::ParseKernelBenchArgs(
      argc, argv, "bench_cache_ops [--layers 8] [--blocks 1024]",
      {{"layers", &num_layers, 1, 1024}, {"blocks", &num_blocks, 1, 1 << 20}});
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("bench_cache_ops: no CUDA device, nothing to measure\n");
    return 0;
  }
  // Llama-3-8B-like block: 8 KV heads x 16 tokens x 128 dims x bf16 = 32 KiB.
  const int64_t block_bytes = int64_t{8} * 16 * 128 * 2;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  const BenchCaches caches = AllocateCaches(num_layers, num_blocks, block_bytes);

  std::mt19937 rng(1);
  std::vector<BlockPair> runs, scattered;
  std::vector<int64_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int b = 0; b < num_blocks; ++b) {
    runs.push_back({b, b});
    scattered.push_back({b, perm[b]});
  }
  const int reps = 7;

  std::printf("\ncache ops: %d layers x K,V x %d blocks of %ld KiB\n", num_layers, num_blocks,
              static_cast<long>(block_bytes / 1024));
  std::printf("%-34s %13s %12s %13s %8s\n", "operation", "bytes", "median", "bandwidth", "of base");
  BenchSwap(caches, runs, scattered, stream, reps);
  BenchCopyBlocks(caches, perm, stream, reps);
  for (int tokens : {1, 64, 256}) BenchRopeCacheWrite(tokens, stream, 50);
  FreeCaches(caches);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace pagoda::kernels

int main(int argc, char** argv) { return pagoda::kernels::Main(argc, argv); }
