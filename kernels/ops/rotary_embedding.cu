#include "kernels/alignment.h"
#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/rotary_embedding.h"
#include "kernels/ops/vec16.cuh"

namespace pagoda::kernels {
namespace {

// One thread block per token; each thread rotates one (x[i], x[i + half]) pair
// of one head, q heads first, then k heads. cos/sin stay in float.
template <typename T>
__global__ void RotaryEmbeddingKernel(const int64_t* __restrict__ positions, T* __restrict__ query,
                                      int64_t query_stride, T* __restrict__ key, int64_t key_stride,
                                      const float* __restrict__ cos_sin_cache, int num_heads,
                                      int num_kv_heads, int head_dim, int rotary_dim) {
  const int64_t token = blockIdx.x;
  const int half = rotary_dim / 2;
  const float* cos_row = cos_sin_cache + positions[token] * rotary_dim;
  const float* sin_row = cos_row + half;
  const int pairs = (num_heads + num_kv_heads) * half;
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int head = i / half;
    const int d = i % half;
    T* x = head < num_heads ? query + token * query_stride + head * head_dim
                            : key + token * key_stride + (head - num_heads) * head_dim;
    const float c = cos_row[d];
    const float s = sin_row[d];
    const float x1 = ToFloat(x[d]);
    const float x2 = ToFloat(x[d + half]);
    x[d] = FromFloat<T>(x1 * c - x2 * s);
    x[d + half] = FromFloat<T>(x2 * c + x1 * s);
  }
}

// The same with one 16-byte vector of each half per thread (and its cos/sin
// as float4s), for heads whose halves are whole, aligned vectors: the
// element-wise kernel spends its time waiting on dependent 2-byte loads.
template <typename T>
__global__ void RotaryEmbeddingVecKernel(const int64_t* __restrict__ positions,
                                         T* __restrict__ query, int64_t query_stride,
                                         T* __restrict__ key, int64_t key_stride,
                                         const float* __restrict__ cos_sin_cache, int num_heads,
                                         int num_kv_heads, int head_dim, int rotary_dim) {
  using V = Vec16<T>;
  const int64_t token = blockIdx.x;
  const int half = rotary_dim / 2;
  const int vecs_per_head = half / V::kSize;
  const float* cos_row = cos_sin_cache + positions[token] * rotary_dim;
  const float* sin_row = cos_row + half;
  const int work = (num_heads + num_kv_heads) * vecs_per_head;
  for (int i = threadIdx.x; i < work; i += blockDim.x) {
    const int head = i / vecs_per_head;
    const int d = (i % vecs_per_head) * V::kSize;
    T* x = head < num_heads ? query + token * query_stride + head * head_dim
                            : key + token * key_stride + (head - num_heads) * head_dim;
    V* first = reinterpret_cast<V*>(x + d);
    V* second = reinterpret_cast<V*>(x + d + half);
    const V a = *first;
    const V b = *second;
    float c[V::kSize];
    float s[V::kSize];
#pragma unroll
    for (int e = 0; e < V::kSize; e += 4) {
      const float4 c4 = *reinterpret_cast<const float4*>(cos_row + d + e);
      const float4 s4 = *reinterpret_cast<const float4*>(sin_row + d + e);
      c[e] = c4.x, c[e + 1] = c4.y, c[e + 2] = c4.z, c[e + 3] = c4.w;
      s[e] = s4.x, s[e + 1] = s4.y, s[e + 2] = s4.z, s[e + 3] = s4.w;
    }
    V out_first;
    V out_second;
#pragma unroll
    for (int e = 0; e < V::kSize; ++e) {
      const float x1 = ToFloat(a.v[e]);
      const float x2 = ToFloat(b.v[e]);
      out_first.v[e] = FromFloat<T>(x1 * c[e] - x2 * s[e]);
      out_second.v[e] = FromFloat<T>(x2 * c[e] + x1 * s[e]);
    }
    *first = out_first;
    *second = out_second;
  }
}

// Whether every half-head of q and k is a whole, aligned vector of T (and its
// cos/sin row an aligned run of float4s).
template <typename T>
bool RotaryVectorizable(const RotaryEmbeddingParams& p) {
  constexpr int kSize = Vec16<T>::kSize;
  const bool key_ok =
      p.num_kv_heads == 0 || (Aligned16(p.key) && p.key_token_stride % kSize == 0);
  return (p.rotary_dim / 2) % kSize == 0 && p.head_dim % kSize == 0 && Aligned16(p.query) &&
         p.query_token_stride % kSize == 0 && key_ok && Aligned16(p.cos_sin_cache);
}

int ThreadsFor(int work) { return work >= 512 ? 512 : ((work + 31) / 32) * 32; }

}  // namespace

cudaError_t LaunchRotaryEmbedding(const RotaryEmbeddingParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.num_heads <= 0 || p.num_kv_heads < 0 || p.head_dim <= 0 ||
      p.rotary_dim <= 0 || p.rotary_dim % 2 != 0 || p.rotary_dim > p.head_dim ||
      p.positions == nullptr || p.query == nullptr || p.cos_sin_cache == nullptr ||
      (p.num_kv_heads > 0 && p.key == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  const int pairs = (p.num_heads + p.num_kv_heads) * (p.rotary_dim / 2);
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (RotaryVectorizable<T>(p)) {
      RotaryEmbeddingVecKernel<T>
          <<<p.num_tokens, ThreadsFor(pairs / Vec16<T>::kSize), 0, stream>>>(
              p.positions, static_cast<T*>(p.query), p.query_token_stride,
              static_cast<T*>(p.key), p.key_token_stride, p.cos_sin_cache, p.num_heads,
              p.num_kv_heads, p.head_dim, p.rotary_dim);
      return cudaGetLastError();
    }
    RotaryEmbeddingKernel<T><<<p.num_tokens, ThreadsFor(pairs), 0, stream>>>(
        p.positions, static_cast<T*>(p.query), p.query_token_stride, static_cast<T*>(p.key),
        p.key_token_stride, p.cos_sin_cache, p.num_heads, p.num_kv_heads, p.head_dim, p.rotary_dim);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
