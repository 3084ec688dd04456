#ifndef PAGODA_KERNELS_OPS_ROTARY_EMBEDDING_H_
#define PAGODA_KERNELS_OPS_ROTARY_EMBEDDING_H_

// Rotary position embedding, Hugging Face "rotate half" convention, applied in
// place to q and k: for i < rotary_dim / 2, with c = cos, s = sin at (pos, i),
//   x[i]        <- x[i] * c - x[i + half] * s
//   x[i + half] <- x[i + half] * c + x[i] * s
// Dimensions from rotary_dim to head_dim are left as they are.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

struct RotaryEmbeddingParams {
  const int64_t* positions = nullptr;  // [num_tokens] device. REQUIRES: in [0, max_position).
  // [num_tokens, num_heads, head_dim], token t at query + t * query_token_stride.
  void* query = nullptr;
  int64_t query_token_stride = 0;
  void* key = nullptr;  // [num_tokens, num_kv_heads, head_dim], likewise
  int64_t key_token_stride = 0;
  // Device float [max_position, rotary_dim], from BuildRopeCosSinCache.
  const float* cos_sin_cache = nullptr;
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int rotary_dim = 0;  // even, <= head_dim; usually == head_dim
  ScalarType dtype = ScalarType::kBF16;
};
cudaError_t LaunchRotaryEmbedding(const RotaryEmbeddingParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_ROTARY_EMBEDDING_H_
