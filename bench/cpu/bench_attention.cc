// Times the CPU backend's PagedAttention at decode over long contexts: one
// query token per sequence, every layer's K/V read once per step, as a
// decode step of the b1 shapes does (8 heads over 2 kv heads of 64, 8
// layers, blocks of 16 tokens laid out in shuffled order). Prints the
// median step time, the K/V bytes it read per second, and that as a
// fraction of the machine's read bandwidth measured in the same run (the
// floor: the K/V cannot be read faster).
//   bench_cpu_attention [threads=2] [cache dtype=f16|bf16|f32] [context=4096] [batch=8]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "bench/cpu/machine_floor.h"
#include "tests/support/step_batch_test_util.h"
#include "worker/cpu/cpu_backend.h"

namespace pagoda::worker {
namespace {

constexpr int kLayers = 8;
constexpr int kHeads = 8;
constexpr int kKvHeads = 2;
constexpr int kHeadDim = 64;
constexpr int kBlockSize = 16;

struct LayerCache {
  std::unique_ptr<Buffer> key, value;
  KvCacheLayer layer;
};

// One layer's K/V for every block, filled with small values (their bytes
// are what matters; the softmax stays finite whatever they are).
LayerCache MakeLayerCache(Backend& backend, DType dtype, int num_blocks, std::mt19937& rng) {
  const size_t n = static_cast<size_t>(num_blocks) * kKvHeads * kBlockSize * kHeadDim;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(n);
  LayerCache cache{backend.Allocate(dtype, n), backend.Allocate(dtype, n), {}};
  for (float& v : values) v = dist(rng);
  ConvertFromFloat(dtype, values.data(), n, cache.key->raw());
  for (float& v : values) v = dist(rng);
  ConvertFromFloat(dtype, values.data(), n, cache.value->raw());
  cache.layer = KvCacheLayer{.key = cache.key->raw(),
                             .value = cache.value->raw(),
                             .dtype = dtype,
                             .num_kv_heads = kKvHeads,
                             .block_size = kBlockSize,
                             .head_dim = kHeadDim};
  return cache;
}

// A decode step's batch: one query token per sequence at the context's end,
// each sequence's blocks drawn from a shuffled pool.
FlatBatch DecodeBatch(int batch, int context, std::mt19937& rng) {
  const int blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> pool(static_cast<size_t>(batch) * blocks_per_seq);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  FlatBatch flat;
  flat.input_ids.assign(batch, 0);
  flat.positions.assign(batch, context - 1);
  flat.query_start.push_back(0);
  for (int s = 0; s < batch; ++s) {
    const int32_t* table = pool.data() + static_cast<size_t>(s) * blocks_per_seq;
    flat.slot_mapping.push_back(table[(context - 1) / kBlockSize] * kBlockSize +
                                (context - 1) % kBlockSize);
    flat.query_start.push_back(s + 1);
    flat.context_lens.push_back(context);
    flat.block_tables.insert(flat.block_tables.end(), table, table + blocks_per_seq);
  }
  flat.max_blocks_per_seq = blocks_per_seq;
  return flat;
}

int Main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const DTypeNames* named = FindDTypeNamed(argc > 2 ? argv[2] : "f16", &DTypeNames::short_name);
  const DType dtype = named == nullptr ? DType::kF16 : named->dtype;
  const int context = std::max(1, argc > 3 ? std::atoi(argv[3]) : 4096);
  const int batch = std::max(1, argc > 4 ? std::atoi(argv[4]) : 8);
  auto backend = CreateCpuBackend(threads);
  std::mt19937 rng(1);
  const FlatBatch flat = DecodeBatch(batch, context, rng);
  const int num_blocks = static_cast<int>(flat.block_tables.size());
  std::vector<LayerCache> layers;
  for (int l = 0; l < kLayers; ++l)
    layers.push_back(MakeLayerCache(*backend, dtype, num_blocks, rng));
  const UploadedStepBatch step(backend.get(), flat);
  std::vector<float> query(static_cast<size_t>(batch) * kHeads * kHeadDim, 0.1f);
  std::vector<float> output(query.size());

  std::vector<double> times;
  for (int round = 0; round < 30; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (const LayerCache& cache : layers) {
      backend->PagedAttention(PagedAttentionParams{.query = query.data(),
                                                   .output = output.data(),
                                                   .cache = cache.layer,
                                                   .num_heads = kHeads,
                                                   .scale = 0.125f,
                                                   .batch = &step.get()});
    }
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  const double ms = times[times.size() / 2];
  const double bytes = 2.0 * kLayers * batch * context * kKvHeads * kHeadDim * DTypeSize(dtype);
  const double floor_gbs = MeasureReadBandwidth(threads).best();
  std::printf("%-6s %7s %5s %9s %8s %9s %8s\n", "cache", "context", "batch", "step_ms", "KV_GB/s",
              "floor_GB/s", "of_floor");
  std::printf("%-6s %7d %5d %9.3f %8.1f %9.1f %7.0f%%\n", FindDTypeNames(dtype)->short_name,
              context, batch, ms, bytes / ms / 1e6, floor_gbs,
              100.0 * bytes / ms / 1e6 / floor_gbs);
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
