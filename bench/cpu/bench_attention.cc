// Times the CPU backend's PagedAttention at decode over long contexts: one
// query token per sequence, every layer's K/V read once per step, as a
// decode step of the b1 shapes does (8 heads over 2 kv heads of 64, 8
// layers, blocks of 16 tokens laid out in shuffled order). Prints the
// median step time, the K/V bytes it read per second, and that as a
// fraction of the machine's read bandwidth measured in the same run (the
// floor: the K/V cannot be read faster). Several cache dtypes, comma
// separated, run in turn in the same process, each step's time also as a
// speedup over the first's.
//   bench_cpu_attention [--threads 2] [--dtypes f16, or e.g. bf16,f32,fp8e4m3]
//                       [--context 4096] [--batch 8] [--shape 8,2,64,8]
// or by position, in that order: bench_cpu_attention 1 f32,bf16 500 377 4,4,16,1.
// --shape (heads,kv_heads,head_dim,layers) gives other shapes, e.g. 4,4,16,1
// for the host-bound model of bench/server/bench_async_scheduling.sh.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_flags.h"
#include "bench/cpu/machine_floor.h"
#include "common/flag_checks.h"
#include "tests/support/step_batch_test_util.h"
#include "worker/cpu/cpu_backend.h"

ABSL_FLAG(int, threads, 2, "CPU backend threads.");
ABSL_FLAG(std::string, dtypes, "f16",
          "Cache dtypes to time in turn, comma separated (f32, f16, bf16, fp8e4m3, fp8e5m2).");
ABSL_FLAG(int, context, 4096, "Tokens of context per sequence.");
ABSL_FLAG(int, batch, 8, "Sequences per step.");
ABSL_FLAG(pagoda::bench::PositiveIntList, shape, (pagoda::bench::PositiveIntList{{8, 2, 64, 8}}),
          "heads,kv_heads,head_dim,layers (the b1 model's by default).");

namespace pagoda::worker {
namespace {

// The attention's shape: the b1 model's unless the command line gives another.
struct AttentionShape {
  int layers = 8;
  int heads = 8;
  int kv_heads = 2;
  int head_dim = 64;
};
AttentionShape shape;
constexpr int kBlockSize = 16;

struct LayerCache {
  std::unique_ptr<Buffer> key, value;
  KvCacheLayer layer;
};

// One layer's K/V for every block, filled with small values (their bytes
// are what matters; the softmax stays finite whatever they are).
LayerCache MakeLayerCache(Backend& backend, DType dtype, int num_blocks, std::mt19937& rng) {
  const size_t n = static_cast<size_t>(num_blocks) * shape.kv_heads * kBlockSize * shape.head_dim;
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
                             .num_kv_heads = shape.kv_heads,
                             .block_size = kBlockSize,
                             .head_dim = shape.head_dim};
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

// Median time of a decode step (every layer's PagedAttention) over a
// `dtype` cache, in ms.
double MedianStepMs(Backend& backend, DType dtype, const FlatBatch& flat, int batch,
                    std::mt19937& rng) {
  const int num_blocks = static_cast<int>(flat.block_tables.size());
  std::vector<LayerCache> layers;
  for (int l = 0; l < shape.layers; ++l)
    layers.push_back(MakeLayerCache(backend, dtype, num_blocks, rng));
  const UploadedStepBatch step(&backend, flat);
  std::vector<float> query(static_cast<size_t>(batch) * shape.heads * shape.head_dim, 0.1f);
  std::vector<float> output(query.size());
  std::vector<double> times;
  for (int round = 0; round < 30; ++round) {
    const auto start = std::chrono::steady_clock::now();
    for (const LayerCache& cache : layers) {
      backend.PagedAttention(PagedAttentionParams{.query = query.data(),
                                                  .output = output.data(),
                                                  .cache = cache.layer,
                                                  .num_heads = shape.heads,
                                                  .scale = 0.125f,
                                                  .batch = &step.get()});
    }
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

constexpr const char* kProgram = "bench_cpu_attention";

// --dtypes, each a dtype's short name (checked).
std::vector<DType> CacheDTypes() {
  std::vector<DType> dtypes;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_dtypes), ',')) {
    const DTypeNames* named = FindDTypeNamed(std::string(name), &DTypeNames::short_name);
    bench::CheckFlags(kProgram, {named != nullptr ? absl::OkStatus()
                                                  : absl::InvalidArgumentError(absl::StrCat(
                                                        "--dtypes: unknown cache dtype ", name,
                                                        " (f32, f16, bf16, fp8e4m3, fp8e5m2)"))});
    dtypes.push_back(named->dtype);
  }
  return dtypes;
}

// --shape into `shape` (checked).
void ReadShape() {
  const std::vector<int> fields = absl::GetFlag(FLAGS_shape).values;
  bench::CheckFlags(kProgram,
                    {fields.size() == 4 && fields[0] % fields[1] == 0
                         ? absl::OkStatus()
                         : absl::InvalidArgumentError("--shape is heads,kv_heads,head_dim,layers, "
                                                      "heads a multiple of kv_heads")});
  shape = {.layers = fields[3], .heads = fields[0], .kv_heads = fields[1], .head_dim = fields[2]};
}

int Main(int argc, char** argv) {
  bench::ParseBenchCommandLine(
      argc, argv,
      {kProgram,
       "bench_cpu_attention [--threads N] [--dtypes f16,...] [--context N] "
       "[--batch N] [--shape heads,kv_heads,head_dim,layers], or those by position"},
      {"threads", "dtypes", "context", "batch", "shape"});
  const int threads = absl::GetFlag(FLAGS_threads);
  const int context = absl::GetFlag(FLAGS_context);
  const int batch = absl::GetFlag(FLAGS_batch);
  bench::CheckFlags(kProgram,
                    {bench::Threads(threads), flag_check::Range("context", context, 1, 1 << 20),
                     flag_check::Range("batch", batch, 1, 4096)});
  const std::vector<DType> dtypes = CacheDTypes();
  ReadShape();
  auto backend = CreateCpuBackend(threads);
  std::mt19937 rng(1);
  const FlatBatch flat = DecodeBatch(batch, context, rng);
  const double floor_gbs = MeasureReadBandwidth(threads).best();
  std::printf("%-8s %7s %5s %9s %8s %9s %8s %8s\n", "cache", "context", "batch", "step_ms",
              "KV_GB/s", "floor_GB/s", "of_floor", "speedup");
  double first_ms = 0.0;
  for (DType dtype : dtypes) {
    const double ms = MedianStepMs(*backend, dtype, flat, batch, rng);
    if (first_ms == 0.0) first_ms = ms;
    const double bytes =
        2.0 * shape.layers * batch * context * shape.kv_heads * shape.head_dim * DTypeSize(dtype);
    std::printf("%-8s %7d %5d %9.3f %8.1f %9.1f %7.0f%% %7.2fx\n",
                FindDTypeNames(dtype)->short_name, context, batch, ms, bytes / ms / 1e6, floor_gbs,
                100.0 * bytes / ms / 1e6 / floor_gbs, first_ms / ms);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
