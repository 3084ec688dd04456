#include <cmath>
#include <cstdint>

#include "kernels/alignment.h"
#include "kernels/fp8_conversion.cuh"
#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/rope_cache_write.h"
#include "kernels/ops/vec16.cuh"

namespace pagoda::kernels {
namespace {

// N consecutive elements of T: one 16-byte access when N fills a Vec16
// (the host checked alignment), else element by element.
template <typename T, int N>
struct RunOf {
  T v[N];

  __device__ __forceinline__ void Load(const T* source) {
    if constexpr (N == Vec16<T>::kSize) {
      const Vec16<T> vec = *reinterpret_cast<const Vec16<T>*>(source);
#pragma unroll
      for (int e = 0; e < N; ++e) v[e] = vec.v[e];
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) v[e] = source[e];
    }
  }

  __device__ __forceinline__ void Store(T* destination) const {
    if constexpr (N == Vec16<T>::kSize) {
      Vec16<T> vec;
#pragma unroll
      for (int e = 0; e < N; ++e) vec.v[e] = v[e];
      *reinterpret_cast<Vec16<T>*>(destination) = vec;
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) destination[e] = v[e];
    }
  }
};

// Stores a run into the cache at element `index`: as it is, or as E4M3 codes
// of x / scale (ReshapeAndCacheFp8Kernel's rule: IEEE division in f32).
template <typename T, bool kFp8, int N>
__device__ __forceinline__ void StoreToCache(void* cache, int64_t index, const RunOf<T, N>& run,
                                             float scale) {
  if constexpr (!kFp8) {
    run.Store(static_cast<T*>(cache) + index);
  } else {
    uint8_t codes[N];
#pragma unroll
    for (int e = 0; e < N; ++e) codes[e] = FloatToE4M3(__fdiv_rn(ToFloat(run.v[e]), scale));
    uint8_t* out = static_cast<uint8_t*>(cache) + index;
    if constexpr (N == 8) {
      uint2 packed;
      memcpy(&packed, codes, 8);
      *reinterpret_cast<uint2*>(out) = packed;  // index is a multiple of 8
    } else if constexpr (N == 4) {
      uint32_t packed;
      memcpy(&packed, codes, 4);
      *reinterpret_cast<uint32_t*>(out) = packed;
    } else {
#pragma unroll
      for (int e = 0; e < N; ++e) out[e] = codes[e];
    }
  }
}

// Rotates the pair of runs at x[d..d+N) and x[d+half..d+half+N) with the
// cos/sin at d, as RotaryEmbeddingKernel does (f32, then rounded to T).
template <typename T, int N>
__device__ __forceinline__ void Rotate(const T* x, int d, int half, const float* cos_row,
                                       RunOf<T, N>* first, RunOf<T, N>* second) {
  RunOf<T, N> a, b;
  a.Load(x + d);
  b.Load(x + d + half);
  const float* sin_row = cos_row + half;
#pragma unroll
  for (int e = 0; e < N; ++e) {
    const float c = cos_row[d + e];
    const float s = sin_row[d + e];
    const float x1 = ToFloat(a.v[e]);
    const float x2 = ToFloat(b.v[e]);
    first->v[e] = FromFloat<T>(x1 * c - x2 * s);
    second->v[e] = FromFloat<T>(x2 * c + x1 * s);
  }
}

struct RopeCacheWriteArgs {
  const int64_t* positions;
  void* query;
  int64_t query_stride;
  const void* key;
  int64_t key_stride;
  const void* value;
  int64_t value_stride;
  const float* cos_sin_cache;
  void* key_cache;
  void* value_cache;
  const int64_t* slot_mapping;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  int rotary_dim;
  int block_size;
  float k_scale;
  float v_scale;
};

// One thread block per token. Its work is cut into runs of N elements, in
// four ranges: q rotations (num_heads x half / N), k rotations into the
// cache (num_kv_heads x half / N), k's unrotated tail (num_kv_heads x
// (head_dim - rotary_dim) / N) and v (num_kv_heads x head_dim / N). A
// padding token (slot < 0) does the q range only.
template <typename T, bool kFp8, int N>
__global__ void RopeCacheWriteKernel(const RopeCacheWriteArgs args) {
  const int64_t token = blockIdx.x;
  const int half = args.rotary_dim / 2;
  const int head_dim = args.head_dim;
  const float* cos_row = args.cos_sin_cache + args.positions[token] * args.rotary_dim;
  const int64_t slot = args.slot_mapping[token];
  const int rot_runs = half / N;
  const int q_work = args.num_heads * rot_runs;
  const int k_work = args.num_kv_heads * rot_runs;
  const int tail_runs = (head_dim - args.rotary_dim) / N;
  const int tail_work = args.num_kv_heads * tail_runs;
  const int v_runs = head_dim / N;
  const int total = slot < 0 ? q_work : q_work + k_work + tail_work + args.num_kv_heads * v_runs;
  const int64_t block = slot / args.block_size;
  const int64_t offset = slot % args.block_size;
  // The cache row of (this token, head h).
  auto cache_row = [&](int h) {
    return ((block * args.num_kv_heads + h) * args.block_size + offset) * head_dim;
  };
  const T* key = static_cast<const T*>(args.key) + token * args.key_stride;
  const T* value = static_cast<const T*>(args.value) + token * args.value_stride;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    RunOf<T, N> first, second;
    if (i < q_work) {
      const int head = i / rot_runs;
      const int d = (i % rot_runs) * N;
      T* x = static_cast<T*>(args.query) + token * args.query_stride + head * head_dim;
      Rotate<T, N>(x, d, half, cos_row, &first, &second);
      first.Store(x + d);
      second.Store(x + d + half);
    } else if (i < q_work + k_work) {
      const int j = i - q_work;
      const int head = j / rot_runs;
      const int d = (j % rot_runs) * N;
      Rotate<T, N>(key + head * head_dim, d, half, cos_row, &first, &second);
      StoreToCache<T, kFp8, N>(args.key_cache, cache_row(head) + d, first, args.k_scale);
      StoreToCache<T, kFp8, N>(args.key_cache, cache_row(head) + d + half, second, args.k_scale);
    } else if (i < q_work + k_work + tail_work) {
      const int j = i - q_work - k_work;
      const int head = j / tail_runs;
      const int d = args.rotary_dim + (j % tail_runs) * N;
      first.Load(key + head * head_dim + d);
      StoreToCache<T, kFp8, N>(args.key_cache, cache_row(head) + d, first, args.k_scale);
    } else {
      const int j = i - q_work - k_work - tail_work;
      const int head = j / v_runs;
      const int d = (j % v_runs) * N;
      first.Load(value + head * head_dim + d);
      StoreToCache<T, kFp8, N>(args.value_cache, cache_row(head) + d, first, args.v_scale);
    }
  }
}

// Whether every run of Vec16<T>::kSize elements starts 16-byte aligned in
// q, k, v and a dtype cache (an FP8 cache then takes 8-byte code runs).
template <typename T>
bool RopeCacheWriteVectorizable(const RopeCacheWriteParams& p) {
  constexpr int kSize = Vec16<T>::kSize;
  const bool caches_ok =
      p.storage == KvCacheStorage::kFp8E4M3 || (Aligned16(p.key_cache) && Aligned16(p.value_cache));
  return (p.rotary_dim / 2) % kSize == 0 && p.head_dim % kSize == 0 && Aligned16(p.query) &&
         Aligned16(p.key) && Aligned16(p.value) && p.query_token_stride % kSize == 0 &&
         p.key_token_stride % kSize == 0 && p.value_token_stride % kSize == 0 && caches_ok &&
         reinterpret_cast<uintptr_t>(p.key_cache) % 8 == 0 &&
         reinterpret_cast<uintptr_t>(p.value_cache) % 8 == 0;
}

int RopeCacheWriteThreads(int work) { return work >= 512 ? 512 : ((work + 31) / 32) * 32; }

template <typename T, bool kFp8, int N>
cudaError_t LaunchRopeCacheWriteAs(const RopeCacheWriteParams& p, cudaStream_t stream) {
  const int work = (p.num_heads + p.num_kv_heads) * (p.rotary_dim / 2) / N +
                   p.num_kv_heads * (2 * p.head_dim - p.rotary_dim) / N;
  const RopeCacheWriteArgs args{
      p.positions,        p.query,       p.query_token_stride, p.key,
      p.key_token_stride, p.value,       p.value_token_stride, p.cos_sin_cache,
      p.key_cache,        p.value_cache, p.slot_mapping,       p.num_heads,
      p.num_kv_heads,     p.head_dim,    p.rotary_dim,         p.block_size,
      p.k_scale,          p.v_scale};
  RopeCacheWriteKernel<T, kFp8, N><<<p.num_tokens, RopeCacheWriteThreads(work), 0, stream>>>(args);
  return cudaGetLastError();
}

template <typename T, bool kFp8>
cudaError_t LaunchRopeCacheWriteFor(const RopeCacheWriteParams& p, cudaStream_t stream) {
  if (RopeCacheWriteVectorizable<T>(p)) {
    return LaunchRopeCacheWriteAs<T, kFp8, Vec16<T>::kSize>(p, stream);
  }
  return LaunchRopeCacheWriteAs<T, kFp8, 1>(p, stream);
}

bool RopeCacheWriteParamsOk(const RopeCacheWriteParams& p) {
  const bool shape_ok = p.num_tokens >= 0 && p.num_heads > 0 && p.num_kv_heads > 0 &&
                        p.head_dim > 0 && p.rotary_dim > 0 && p.rotary_dim % 2 == 0 &&
                        p.rotary_dim <= p.head_dim && p.block_size > 0;
  const bool buffers_ok = p.positions != nullptr && p.query != nullptr && p.key != nullptr &&
                          p.value != nullptr && p.cos_sin_cache != nullptr &&
                          p.key_cache != nullptr && p.value_cache != nullptr &&
                          p.slot_mapping != nullptr;
  // E5M2 caches are written by LaunchReshapeAndCache only.
  const bool storage_ok =
      p.storage == KvCacheStorage::kDType || p.storage == KvCacheStorage::kFp8E4M3;
  const bool scales_ok =
      p.storage != KvCacheStorage::kFp8E4M3 || (std::isfinite(p.k_scale) && p.k_scale > 0.0f &&
                                                std::isfinite(p.v_scale) && p.v_scale > 0.0f);
  return shape_ok && buffers_ok && storage_ok && scales_ok;
}

}  // namespace

cudaError_t LaunchRopeCacheWrite(const RopeCacheWriteParams& p, cudaStream_t stream) {
  if (!RopeCacheWriteParamsOk(p)) return cudaErrorInvalidValue;
  if (p.num_tokens == 0) return cudaSuccess;
  const bool fp8 = p.storage == KvCacheStorage::kFp8E4M3;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return fp8 ? LaunchRopeCacheWriteFor<T, true>(p, stream)
               : LaunchRopeCacheWriteFor<T, false>(p, stream);
  });
}

}  // namespace pagoda::kernels
