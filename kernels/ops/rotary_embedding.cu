#include "kernels/ops/dispatch.cuh"
#include "kernels/ops/rotary_embedding.h"

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
  const int threads = pairs >= 512 ? 512 : ((pairs + 31) / 32) * 32;
  return DispatchScalarType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RotaryEmbeddingKernel<T><<<p.num_tokens, threads, 0, stream>>>(
        p.positions, static_cast<T*>(p.query), p.query_token_stride, static_cast<T*>(p.key),
        p.key_token_stride, p.cos_sin_cache, p.num_heads, p.num_kv_heads, p.head_dim, p.rotary_dim);
    return cudaGetLastError();
  });
}

}  // namespace pagoda::kernels
