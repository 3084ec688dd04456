#include <cmath>
#include <cstdint>

#include "kernels/alignment.h"
#include "kernels/fp8_conversion.cuh"
#include "kernels/ops/cache_ops.h"
#include "kernels/ops/dispatch.cuh"

namespace pagoda::kernels {
namespace {

// One thread block per token; threads stride over (head, vector) pairs of
// both K and V. VecT is the copy unit: 16 bytes when every row and pointer is
// 16-byte aligned, else one element.
template <typename VecT>
__global__ void ReshapeAndCacheKernel(const VecT* __restrict__ key, const VecT* __restrict__ value,
                                      int64_t key_stride, int64_t value_stride,
                                      VecT* __restrict__ key_cache, VecT* __restrict__ value_cache,
                                      const int64_t* __restrict__ slot_mapping, int num_kv_heads,
                                      int vecs_per_head, int block_size) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;  // Padding token.
  const int64_t block = slot / block_size;
  const int64_t offset = slot % block_size;
  const int work = num_kv_heads * vecs_per_head;
  for (int i = threadIdx.x; i < work; i += blockDim.x) {
    const int head = i / vecs_per_head;
    const int vec = i % vecs_per_head;
    const int64_t dst = ((block * num_kv_heads + head) * block_size + offset) * vecs_per_head + vec;
    key_cache[dst] = key[token * key_stride + i];
    value_cache[dst] = value[token * value_stride + i];
  }
}

template <typename VecT>
cudaError_t LaunchReshapeAndCacheAs(const ReshapeAndCacheParams& p, int64_t elem_bytes,
                                    cudaStream_t stream) {
  constexpr int64_t kVec = sizeof(VecT);
  const int vecs_per_head = static_cast<int>(p.head_dim * elem_bytes / kVec);
  const int work = p.num_kv_heads * vecs_per_head;
  const int threads = work >= 512 ? 512 : ((work + 31) / 32) * 32;
  ReshapeAndCacheKernel<VecT><<<p.num_tokens, threads, 0, stream>>>(
      static_cast<const VecT*>(p.key), static_cast<const VecT*>(p.value),
      p.key_token_stride * elem_bytes / kVec, p.value_token_stride * elem_bytes / kVec,
      static_cast<VecT*>(p.key_cache), static_cast<VecT*>(p.value_cache), p.slot_mapping,
      p.num_kv_heads, vecs_per_head, p.block_size);
  return cudaGetLastError();
}

// The FP8 write (E4M3, or kE5M2 E5M2): one thread block per token, threads striding over its
// (head, element) pairs of K and V, each element divided by its scale
// (IEEE division, as the CPU's f32 `x / scale`) and rounded to a code. The
// cache write is a sliver of a step's bytes, so plain element loads do.
template <typename T, bool kE5M2>
__global__ void ReshapeAndCacheFp8Kernel(const T* __restrict__ key, const T* __restrict__ value,
                                         int64_t key_stride, int64_t value_stride,
                                         uint8_t* __restrict__ key_cache,
                                         uint8_t* __restrict__ value_cache,
                                         const int64_t* __restrict__ slot_mapping, int num_kv_heads,
                                         int head_dim, int block_size, float k_scale,
                                         float v_scale) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;  // Padding token.
  const int64_t block = slot / block_size;
  const int64_t offset = slot % block_size;
  const int work = num_kv_heads * head_dim;
  for (int i = threadIdx.x; i < work; i += blockDim.x) {
    const int head = i / head_dim;
    const int d = i % head_dim;
    const int64_t dst = ((block * num_kv_heads + head) * block_size + offset) * head_dim + d;
    const float k = __fdiv_rn(ToFloat(key[token * key_stride + i]), k_scale);
    const float v = __fdiv_rn(ToFloat(value[token * value_stride + i]), v_scale);
    key_cache[dst] = kE5M2 ? FloatToE5M2(k) : FloatToE4M3(k);
    value_cache[dst] = kE5M2 ? FloatToE5M2(v) : FloatToE4M3(v);
  }
}

cudaError_t LaunchReshapeAndCacheFp8(const ReshapeAndCacheParams& p, cudaStream_t stream) {
  if (!(std::isfinite(p.k_scale) && p.k_scale > 0.0f && std::isfinite(p.v_scale) &&
        p.v_scale > 0.0f)) {
    return cudaErrorInvalidValue;
  }
  const int work = p.num_kv_heads * p.head_dim;
  const int threads = work >= 512 ? 512 : ((work + 31) / 32) * 32;
  const bool e5m2 = p.storage == KvCacheStorage::kFp8E5M2;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto* kernel = e5m2 ? ReshapeAndCacheFp8Kernel<T, true> : ReshapeAndCacheFp8Kernel<T, false>;
    kernel<<<p.num_tokens, threads, 0, stream>>>(
        static_cast<const T*>(p.key), static_cast<const T*>(p.value), p.key_token_stride,
        p.value_token_stride, static_cast<uint8_t*>(p.key_cache),
        static_cast<uint8_t*>(p.value_cache), p.slot_mapping, p.num_kv_heads, p.head_dim,
        p.block_size, p.k_scale, p.v_scale);
    return cudaGetLastError();
  });
}

// One thread block per (pair, layer); 16-byte copies when the block size allows.
template <typename VecT>
__global__ void CopyBlocksKernel(void* const* key_caches, void* const* value_caches,
                                 const int64_t* __restrict__ block_pairs, int64_t vecs_per_block) {
  const int64_t pair = blockIdx.x;
  const int layer = blockIdx.y;
  const int64_t src = block_pairs[2 * pair] * vecs_per_block;
  const int64_t dst = block_pairs[2 * pair + 1] * vecs_per_block;
  VecT* key = static_cast<VecT*>(key_caches[layer]);
  VecT* value = static_cast<VecT*>(value_caches[layer]);
  for (int64_t i = threadIdx.x; i < vecs_per_block; i += blockDim.x) {
    key[dst + i] = key[src + i];
    value[dst + i] = value[src + i];
  }
}

}  // namespace

cudaError_t LaunchReshapeAndCache(const ReshapeAndCacheParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.block_size <= 0 ||
      p.key == nullptr || p.value == nullptr || p.key_cache == nullptr ||
      p.value_cache == nullptr || p.slot_mapping == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.storage == KvCacheStorage::kFp8E4M3 || p.storage == KvCacheStorage::kFp8E5M2) {
    return LaunchReshapeAndCacheFp8(p, stream);
  }
  const int64_t elem = ScalarTypeSize(p.dtype);
  const bool vectorizable =
      (p.head_dim * elem) % 16 == 0 && (p.key_token_stride * elem) % 16 == 0 &&
      (p.value_token_stride * elem) % 16 == 0 && Aligned16(p.key) && Aligned16(p.value) &&
      Aligned16(p.key_cache) && Aligned16(p.value_cache);
  if (vectorizable) return LaunchReshapeAndCacheAs<uint4>(p, elem, stream);
  if (elem == 4) return LaunchReshapeAndCacheAs<uint32_t>(p, elem, stream);
  return LaunchReshapeAndCacheAs<uint16_t>(p, elem, stream);
}

cudaError_t LaunchCopyBlocks(const CopyBlocksParams& p, cudaStream_t stream) {
  if (p.num_pairs < 0 || p.num_layers <= 0 || p.block_bytes <= 0 || p.key_caches == nullptr ||
      p.value_caches == nullptr || (p.num_pairs > 0 && p.block_pairs == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (p.num_pairs == 0) return cudaSuccess;
  if (p.num_layers > 65535) return cudaErrorInvalidValue;
  const dim3 grid(p.num_pairs, p.num_layers);
  // Cache base pointers come from cudaMalloc (256-byte aligned), so only the
  // block size decides the copy width.
  if (p.block_bytes % 16 == 0) {
    CopyBlocksKernel<uint4>
        <<<grid, 256, 0, stream>>>(p.key_caches, p.value_caches, p.block_pairs, p.block_bytes / 16);
  } else if (p.block_bytes % 4 == 0) {
    CopyBlocksKernel<uint32_t>
        <<<grid, 256, 0, stream>>>(p.key_caches, p.value_caches, p.block_pairs, p.block_bytes / 4);
  } else {
    CopyBlocksKernel<uint8_t>
        <<<grid, 256, 0, stream>>>(p.key_caches, p.value_caches, p.block_pairs, p.block_bytes);
  }
  return cudaGetLastError();
}

}  // namespace pagoda::kernels
