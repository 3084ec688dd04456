// Exact-match tests of reshape-and-cache, copy-blocks and swap-blocks over
// the head sizes, block sizes and element types the engine serves, and of
// the write into an FP8 E4M3 or E5M2 cache against the CPU worker's conversion
// (common/fp8.h).

#include "kernels/ops/cache_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/fp8.h"
#include "kernels/ops/swap_blocks.h"
#include "tests/kernels/cuda_test_util.h"

namespace pagoda::kernels {
namespace {

using testing::DeviceBuffer;
using testing::Encode;
using testing::RoundTrip;

std::vector<uint8_t> RandomBytes(size_t count, std::mt19937& rng) {
  std::vector<uint8_t> bytes(count);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

struct CacheShape {
  int num_blocks;
  int num_kv_heads;
  int block_size;
  int head_dim;
  ScalarType dtype;
  size_t elem() const { return ScalarTypeSize(dtype); }
  size_t block_bytes() const { return size_t{1} * num_kv_heads * block_size * head_dim * elem(); }
  size_t cache_bytes() const { return block_bytes() * num_blocks; }
};

// Host model of one slot write: row (token, head) lands at
// [block, head, offset, :].
void WriteSlot(const CacheShape& s, const uint8_t* src_token, int64_t slot, uint8_t* cache) {
  const int64_t block = slot / s.block_size, offset = slot % s.block_size;
  const size_t row = s.head_dim * s.elem();
  for (int h = 0; h < s.num_kv_heads; ++h) {
    std::memcpy(cache + ((block * s.num_kv_heads + h) * s.block_size + offset) * row,
                src_token + h * row, row);
  }
}

class CacheWriteTest : public ::testing::TestWithParam<std::tuple<int, int, ScalarType>> {};

TEST_P(CacheWriteTest, ReshapeAndCacheWritesExactlyTheMappedSlots) {
  const auto [head_dim, block_size, dtype] = GetParam();
  const CacheShape s{23, 3, block_size, head_dim, dtype};
  std::mt19937 rng(head_dim * 131 + block_size);
  // Tokens are a slice of a fused QKV row (stride wider than the K part), and
  // one in five is padding (-1).
  const int num_tokens = 41;
  const int64_t token_stride = int64_t{s.num_kv_heads} * head_dim * 3;  // elements
  const size_t token_bytes = token_stride * s.elem();
  const std::vector<uint8_t> keys = RandomBytes(num_tokens * token_bytes, rng);
  const std::vector<uint8_t> values = RandomBytes(num_tokens * token_bytes, rng);
  std::vector<int64_t> all_slots(s.num_blocks * block_size);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int64_t> slots(all_slots.begin(), all_slots.begin() + num_tokens);
  for (int t = 0; t < num_tokens; t += 5) slots[t] = -1;

  std::vector<uint8_t> key_cache = RandomBytes(s.cache_bytes(), rng);  // poison
  std::vector<uint8_t> value_cache = RandomBytes(s.cache_bytes(), rng);
  DeviceBuffer d_keys(keys.size()), d_values(values.size()), d_slots(slots.size() * 8);
  DeviceBuffer d_key_cache(s.cache_bytes()), d_value_cache(s.cache_bytes());
  d_keys.Upload(keys);
  d_values.Upload(values);
  d_slots.Upload(slots);
  d_key_cache.Upload(key_cache);
  d_value_cache.Upload(value_cache);

  ReshapeAndCacheParams p;
  p.key = d_keys.get();
  p.value = d_values.get();
  p.key_token_stride = p.value_token_stride = token_stride;
  p.key_cache = d_key_cache.get();
  p.value_cache = d_value_cache.get();
  p.slot_mapping = d_slots.as<int64_t>();
  p.num_tokens = num_tokens;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.dtype = dtype;
  PAGODA_ASSERT_CUDA_OK(LaunchReshapeAndCache(p, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());

  for (int t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    WriteSlot(s, &keys[t * token_bytes], slots[t], key_cache.data());
    WriteSlot(s, &values[t * token_bytes], slots[t], value_cache.data());
  }
  EXPECT_TRUE(d_key_cache.Download<uint8_t>(s.cache_bytes()) == key_cache);
  EXPECT_TRUE(d_value_cache.Download<uint8_t>(s.cache_bytes()) == value_cache);
}

TEST_P(CacheWriteTest, CopyBlocksCopiesEveryLayerInOneLaunch) {
  const auto [head_dim, block_size, dtype] = GetParam();
  const CacheShape s{19, 2, block_size, head_dim, dtype};
  const int num_layers = 3;
  std::mt19937 rng(head_dim * 7 + block_size);
  std::vector<int64_t> ids(s.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  // Sources from the first half, destinations from the second: disjoint.
  const int num_pairs = 6;
  std::vector<int64_t> pairs;
  for (int i = 0; i < num_pairs; ++i) {
    pairs.push_back(ids[i]);
    pairs.push_back(ids[s.num_blocks - 1 - i]);
  }
  std::vector<std::vector<uint8_t>> host(2 * num_layers);
  std::vector<std::unique_ptr<DeviceBuffer>> device;
  std::vector<void*> key_ptrs, value_ptrs;
  for (int i = 0; i < 2 * num_layers; ++i) {
    host[i] = RandomBytes(s.cache_bytes(), rng);
    device.push_back(std::make_unique<DeviceBuffer>(s.cache_bytes()));
    device.back()->Upload(host[i]);
    (i % 2 == 0 ? key_ptrs : value_ptrs).push_back(device.back()->get());
  }
  DeviceBuffer d_keys(num_layers * sizeof(void*)), d_values(num_layers * sizeof(void*));
  DeviceBuffer d_pairs(pairs.size() * 8);
  d_keys.Upload(key_ptrs);
  d_values.Upload(value_ptrs);
  d_pairs.Upload(pairs);

  CopyBlocksParams p;
  p.key_caches = d_keys.as<void*>();
  p.value_caches = d_values.as<void*>();
  p.block_pairs = d_pairs.as<int64_t>();
  p.num_layers = num_layers;
  p.num_pairs = num_pairs;
  p.block_bytes = s.block_bytes();
  PAGODA_ASSERT_CUDA_OK(LaunchCopyBlocks(p, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());

  for (int i = 0; i < 2 * num_layers; ++i) {
    for (int j = 0; j < num_pairs; ++j) {
      std::memcpy(&host[i][pairs[2 * j + 1] * s.block_bytes()],
                  &host[i][pairs[2 * j] * s.block_bytes()], s.block_bytes());
    }
    EXPECT_TRUE(device[i]->Download<uint8_t>(s.cache_bytes()) == host[i]) << "tensor " << i;
  }
}

// Pinned host memory, freed on scope exit.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes) {
    if (cudaHostAlloc(&data_, bytes, cudaHostAllocDefault) != cudaSuccess) std::abort();
  }
  ~PinnedBuffer() { cudaFreeHost(data_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(data_); }

 private:
  void* data_ = nullptr;
};

TEST_P(CacheWriteTest, SwapOutAndInMovesExactBlocksWithCoalescedCopies) {
  const auto [head_dim, block_size, dtype] = GetParam();
  const CacheShape gpu{16, 2, block_size, head_dim, dtype};
  const CacheShape cpu{12, 2, block_size, head_dim, dtype};
  const int num_layers = 2;
  std::mt19937 rng(head_dim + block_size * 3);
  std::vector<std::vector<uint8_t>> gpu_host(2 * num_layers);
  std::vector<std::unique_ptr<DeviceBuffer>> gpu_caches;
  std::vector<std::unique_ptr<PinnedBuffer>> cpu_caches;
  std::vector<void*> gpu_k, gpu_v, cpu_k, cpu_v;
  for (int i = 0; i < 2 * num_layers; ++i) {
    gpu_host[i] = RandomBytes(gpu.cache_bytes(), rng);
    gpu_caches.push_back(std::make_unique<DeviceBuffer>(gpu.cache_bytes()));
    gpu_caches.back()->Upload(gpu_host[i]);
    cpu_caches.push_back(std::make_unique<PinnedBuffer>(cpu.cache_bytes()));
    std::memset(cpu_caches.back()->get(), 0xA5, cpu.cache_bytes());
    (i % 2 == 0 ? gpu_k : gpu_v).push_back(gpu_caches.back()->get());
    (i % 2 == 0 ? cpu_k : cpu_v).push_back(cpu_caches.back()->get());
  }
  // Out of order on purpose; 3,4,5 -> 0,1,2 and 9,10 -> 6,7 are runs.
  const std::vector<BlockPair> out_pairs = {{4, 1}, {9, 6}, {3, 0}, {12, 9}, {5, 2}, {10, 7}};
  SwapBlocksParams out;
  out.src_key_caches = gpu_k.data();
  out.src_value_caches = gpu_v.data();
  out.dst_key_caches = cpu_k.data();
  out.dst_value_caches = cpu_v.data();
  out.num_layers = num_layers;
  out.block_bytes = gpu.block_bytes();
  out.kind = cudaMemcpyDeviceToHost;
  int64_t copies = 0;
  PAGODA_ASSERT_CUDA_OK(SwapBlocks(out, out_pairs, nullptr, &copies));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(copies, 3 * 2 * num_layers);  // 3 runs per tensor per layer
  const size_t bb = gpu.block_bytes();
  for (int i = 0; i < 2 * num_layers; ++i) {
    for (const BlockPair& pair : out_pairs) {
      EXPECT_EQ(0, std::memcmp(cpu_caches[i]->get() + pair.dst * bb,
                               gpu_host[i].data() + pair.src * bb, bb));
    }
    EXPECT_EQ(cpu_caches[i]->get()[3 * bb], 0xA5);  // CPU block 3 untouched
  }
  // Swap back in to other GPU blocks.
  const std::vector<BlockPair> in_pairs = {{0, 13}, {1, 14}, {2, 15}, {9, 0}};
  SwapBlocksParams in = out;
  in.src_key_caches = cpu_k.data();
  in.src_value_caches = cpu_v.data();
  in.dst_key_caches = gpu_k.data();
  in.dst_value_caches = gpu_v.data();
  in.kind = cudaMemcpyHostToDevice;
  PAGODA_ASSERT_CUDA_OK(SwapBlocks(in, in_pairs, nullptr, &copies));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(copies, 2 * 2 * num_layers);
  for (int i = 0; i < 2 * num_layers; ++i) {
    std::vector<uint8_t> expected = gpu_host[i];
    for (const BlockPair& pair : in_pairs) {
      std::memcpy(&expected[pair.dst * bb], cpu_caches[i]->get() + pair.src * bb, bb);
    }
    EXPECT_TRUE(gpu_caches[i]->Download<uint8_t>(gpu.cache_bytes()) == expected) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    HeadAndBlockSizes, CacheWriteTest,
    ::testing::Combine(::testing::Values(64, 80, 128, 256), ::testing::Values(8, 16, 32),
                       ::testing::Values(ScalarType::kF32, ScalarType::kF16, ScalarType::kBF16)),
    [](const auto& info) {
      return "head" + std::to_string(std::get<0>(info.param)) + "_block" +
             std::to_string(std::get<1>(info.param)) + "_" +
             ScalarTypeName(std::get<2>(info.param));
    });

TEST(CacheOpsTest, UnalignedRowsFallBackToElementCopies) {
  // head_dim 6 in bf16 is 12 bytes: no 16-byte vector path.
  const CacheShape s{4, 1, 8, 6, ScalarType::kBF16};
  std::mt19937 rng(5);
  const std::vector<uint8_t> keys = RandomBytes(3 * 12, rng), values = RandomBytes(3 * 12, rng);
  const std::vector<int64_t> slots = {31, -1, 9};
  std::vector<uint8_t> key_cache = RandomBytes(s.cache_bytes(), rng);
  std::vector<uint8_t> value_cache = key_cache;
  DeviceBuffer dk(keys.size()), dv(values.size()), ds(24), dkc(s.cache_bytes()),
      dvc(s.cache_bytes());
  dk.Upload(keys);
  dv.Upload(values);
  ds.Upload(slots);
  dkc.Upload(key_cache);
  dvc.Upload(value_cache);
  ReshapeAndCacheParams p{dk.get(),         dv.get(), 6, 6, dkc.get(), dvc.get(),
                          ds.as<int64_t>(), 3,        1, 6, 8,         ScalarType::kBF16};
  PAGODA_ASSERT_CUDA_OK(LaunchReshapeAndCache(p, nullptr));
  PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
  WriteSlot(s, &keys[0], 31, key_cache.data());
  WriteSlot(s, &keys[24], 9, key_cache.data());
  WriteSlot(s, &values[0], 31, value_cache.data());
  WriteSlot(s, &values[24], 9, value_cache.data());
  EXPECT_TRUE(dkc.Download<uint8_t>(s.cache_bytes()) == key_cache);
  EXPECT_TRUE(dvc.Download<uint8_t>(s.cache_bytes()) == value_cache);
}

TEST(CacheOpsTest, CopyBlocksOddBlockBytesUseTheNarrowCopies) {
  // The parameterised shapes all have 16-byte blocks; these take the 4-byte
  // (36-byte blocks) and 1-byte (30-byte blocks) copy paths.
  for (const int head_dim : {6, 5}) {
    const CacheShape s{9, 1, 3, head_dim, ScalarType::kBF16};
    std::mt19937 rng(head_dim);
    std::vector<uint8_t> keys = RandomBytes(s.cache_bytes(), rng);
    std::vector<uint8_t> values = RandomBytes(s.cache_bytes(), rng);
    DeviceBuffer dk(s.cache_bytes()), dv(s.cache_bytes());
    dk.Upload(keys);
    dv.Upload(values);
    const std::vector<void*> key_ptrs = {dk.get()}, value_ptrs = {dv.get()};
    const std::vector<int64_t> pairs = {1, 7, 4, 0, 8, 5};
    DeviceBuffer d_keys(sizeof(void*)), d_values(sizeof(void*)), d_pairs(pairs.size() * 8);
    d_keys.Upload(key_ptrs);
    d_values.Upload(value_ptrs);
    d_pairs.Upload(pairs);
    const CopyBlocksParams p{d_keys.as<void*>(),
                             d_values.as<void*>(),
                             d_pairs.as<int64_t>(),
                             1,
                             3,
                             static_cast<int64_t>(s.block_bytes())};
    PAGODA_ASSERT_CUDA_OK(LaunchCopyBlocks(p, nullptr));
    PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());
    const size_t bb = s.block_bytes();
    for (size_t j = 0; j < pairs.size(); j += 2) {
      std::memcpy(&keys[pairs[j + 1] * bb], &keys[pairs[j] * bb], bb);
      std::memcpy(&values[pairs[j + 1] * bb], &values[pairs[j] * bb], bb);
    }
    EXPECT_TRUE(dk.Download<uint8_t>(s.cache_bytes()) == keys) << "head_dim " << head_dim;
    EXPECT_TRUE(dv.Download<uint8_t>(s.cache_bytes()) == values) << "head_dim " << head_dim;
  }
}

// Values for an FP8 write at `scale`: random ones over E4M3's whole range
// and past it (saturation), and the edges spelled out: exact midpoints
// between codes (ties to even), subnormal codes and the smallest normal,
// +-448 and just past, zeros of both signs and a NaN, all times the scale
// so that x / scale lands on them.
// E5M2 (bf16-like range: bias 15, largest 57344, subnormals down to 2^-16)
// adds its own: the largest, a midpoint past it, the smallest subnormal and
// half of it, mantissa ties, infinities (saturated), over a wider spread.
std::vector<float> Fp8WriteValues(size_t count, float scale, KvCacheStorage storage,
                                  std::mt19937& rng) {
  std::vector<float> values;
  const bool e5m2 = storage == KvCacheStorage::kFp8E5M2;
  const float e5m2_edges[] = {
      57344.0f, -61440.0f, 0x1p-16f, 0x1p-17f, 3 * 0x1p-17f,
      1.125f,   -1.375f,   7.0f,     0x1p-14f, std::numeric_limits<float>::infinity()};
  if (e5m2) {
    for (float edge : e5m2_edges) values.push_back(edge * scale);
  }
  const float edges[] = {0.0f,     -0.0f,        448.0f,   -448.0f,
                         464.0f,   -1e6f,        480.0f,   0x1p-9f,
                         0x1p-10f, 3 * 0x1p-11f, 0x1p-6f,  15 * 0x1p-10f,
                         1.0625f,  1.1875f,      -1.0625f, 17.0f,
                         19.0f,    240.0f,       232.0f,   std::numeric_limits<float>::quiet_NaN()};
  for (float edge : edges) values.push_back(edge * scale);
  std::uniform_real_distribution<float> exponent(e5m2 ? -18.0f : -12.0f, e5m2 ? 17.0f : 10.0f);
  std::bernoulli_distribution negative(0.5);
  while (values.size() < count) {
    const float magnitude = std::exp2(exponent(rng)) * scale;
    values.push_back(negative(rng) ? -magnitude : magnitude);
  }
  values.resize(count);
  std::shuffle(values.begin() + 8, values.end(), rng);  // edges in several tokens
  return values;
}

// The CPU worker's FP8 cache row (worker/cpu WriteKvCache): E4M3(x / scale)
// or E5M2(x / scale).
std::vector<uint8_t> HostFp8Codes(const std::vector<float>& values, float scale,
                                  KvCacheStorage storage) {
  std::vector<uint8_t> codes(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    codes[i] = storage == KvCacheStorage::kFp8E5M2 ? FloatToFp8E5M2(values[i] / scale)
                                                   : FloatToFp8E4M3(values[i] / scale);
  }
  return codes;
}

// Equal codes, or two E5M2 NaNs (the device's cvt writes 0x7F, the host
// sign | 0x7E: both read back as NaN, as the attention kernels widen them).
bool SameFp8Code(uint8_t got, uint8_t want, KvCacheStorage storage) {
  auto e5m2_nan = [](uint8_t code) { return (code & 0x7C) == 0x7C && (code & 0x03) != 0; };
  return got == want || (storage == KvCacheStorage::kFp8E5M2 && e5m2_nan(got) && e5m2_nan(want));
}

void RunFp8WriteSweep(KvCacheStorage storage, uint32_t seed) {
  struct Scales {
    float k, v;
  };
  const Scales scale_pairs[] = {{1.0f, 1.0f}, {0.37f, 2.5f}, {1.0f / 128, 0.5f}};
  for (const ScalarType dtype : {ScalarType::kF32, ScalarType::kF16, ScalarType::kBF16}) {
    for (const int head_dim : {64, 128, 6}) {
      for (const Scales& scales : scale_pairs) {
        SCOPED_TRACE(std::string(ScalarTypeName(dtype)) + " head_dim " + std::to_string(head_dim) +
                     " k_scale " + std::to_string(scales.k) + " v_scale " +
                     std::to_string(scales.v));
        std::mt19937 rng(seed++);
        const CacheShape s{7, 3, 16, head_dim, ScalarType::kFp8E4M3};
        const int num_tokens = 13;
        // Rows of a fused QKV product: K then V then room, with a stride.
        const int64_t row = int64_t{s.num_kv_heads} * head_dim;
        const int64_t stride = 3 * row;
        // The inputs as the kernel reads them: rounded to dtype first.
        const std::vector<float> keys =
            RoundTrip(dtype, Fp8WriteValues(num_tokens * stride, scales.k, storage, rng));
        const std::vector<float> values =
            RoundTrip(dtype, Fp8WriteValues(num_tokens * stride, scales.v, storage, rng));
        std::vector<int64_t> slots(num_tokens);
        std::iota(slots.begin(), slots.end(), 0);
        std::shuffle(slots.begin(), slots.end(), rng);
        for (int64_t& slot : slots) slot = slot * 7 % (s.num_blocks * s.block_size);
        slots[4] = -1;  // padding

        std::vector<uint8_t> key_cache = RandomBytes(s.cache_bytes(), rng);  // poison
        std::vector<uint8_t> value_cache = RandomBytes(s.cache_bytes(), rng);
        DeviceBuffer d_keys(keys.size() * ScalarTypeSize(dtype));
        DeviceBuffer d_values(values.size() * ScalarTypeSize(dtype));
        DeviceBuffer d_slots(slots.size() * 8), d_key_cache(s.cache_bytes()),
            d_value_cache(s.cache_bytes());
        d_keys.Upload(Encode(dtype, keys));
        d_values.Upload(Encode(dtype, values));
        d_slots.Upload(slots);
        d_key_cache.Upload(key_cache);
        d_value_cache.Upload(value_cache);

        ReshapeAndCacheParams p;
        p.key = d_keys.get();
        p.value = d_values.get();
        p.key_token_stride = p.value_token_stride = stride;
        p.key_cache = d_key_cache.get();
        p.value_cache = d_value_cache.get();
        p.slot_mapping = d_slots.as<int64_t>();
        p.num_tokens = num_tokens;
        p.num_kv_heads = s.num_kv_heads;
        p.head_dim = head_dim;
        p.block_size = s.block_size;
        p.dtype = dtype;
        p.storage = storage;
        p.k_scale = scales.k;
        p.v_scale = scales.v;
        PAGODA_ASSERT_CUDA_OK(LaunchReshapeAndCache(p, nullptr));
        PAGODA_ASSERT_CUDA_OK(cudaDeviceSynchronize());

        for (int t = 0; t < num_tokens; ++t) {
          if (slots[t] < 0) continue;
          const std::vector<float> k_row(keys.begin() + t * stride,
                                         keys.begin() + t * stride + row);
          const std::vector<float> v_row(values.begin() + t * stride,
                                         values.begin() + t * stride + row);
          WriteSlot(s, HostFp8Codes(k_row, scales.k, storage).data(), slots[t], key_cache.data());
          WriteSlot(s, HostFp8Codes(v_row, scales.v, storage).data(), slots[t], value_cache.data());
        }
        const std::vector<uint8_t> got_k = d_key_cache.Download<uint8_t>(s.cache_bytes());
        const std::vector<uint8_t> got_v = d_value_cache.Download<uint8_t>(s.cache_bytes());
        size_t mismatches = 0;
        for (size_t i = 0; i < got_k.size(); ++i) {
          if (!SameFp8Code(got_k[i], key_cache[i], storage) ||
              !SameFp8Code(got_v[i], value_cache[i], storage)) {
            if (++mismatches <= 5) {
              ADD_FAILURE() << "byte " << i << ": k " << int{got_k[i]} << " want "
                            << int{key_cache[i]} << ", v " << int{got_v[i]} << " want "
                            << int{value_cache[i]};
            }
          }
        }
        EXPECT_EQ(mismatches, 0u);
      }
    }
  }
}

TEST(CacheOpsTest, Fp8WriteQuantizesEveryElementAsTheCpuWorkerDoes) {
  RunFp8WriteSweep(KvCacheStorage::kFp8E4M3, 11);
}

TEST(CacheOpsTest, Fp8E5M2WriteQuantizesEveryElementAsTheCpuWorkerDoes) {
  RunFp8WriteSweep(KvCacheStorage::kFp8E5M2, 41);
}

TEST(CacheOpsTest, Fp8WriteRejectsScalesThatAreNotFinitePositive) {
  DeviceBuffer buffer(1024);
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    ReshapeAndCacheParams p;
    p.key = p.value = buffer.get();
    p.key_cache = p.value_cache = buffer.get();
    p.slot_mapping = buffer.as<int64_t>();
    p.num_tokens = 1;
    p.num_kv_heads = 1;
    p.head_dim = 8;
    p.block_size = 16;
    for (KvCacheStorage storage : {KvCacheStorage::kFp8E4M3, KvCacheStorage::kFp8E5M2}) {
      p.storage = storage;
      p.v_scale = bad;
      EXPECT_EQ(LaunchReshapeAndCache(p, nullptr), cudaErrorInvalidValue) << bad;
    }
  }
}

TEST(CacheOpsTest, RejectsMissingBuffers) {
  EXPECT_EQ(LaunchReshapeAndCache(ReshapeAndCacheParams{}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(LaunchCopyBlocks(CopyBlocksParams{}, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pagoda::kernels
