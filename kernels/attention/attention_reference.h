// Plain CPU float64 reference for attention over a paged KV cache, used by the
// kernel tests. Deliberately the obvious loops: no tiling, no online softmax.
#ifndef PAGODA_KERNELS_ATTENTION_ATTENTION_REFERENCE_H_
#define PAGODA_KERNELS_ATTENTION_ATTENTION_REFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pagoda::kernels {

// Host mirror of one layer's K and V caches,
// each [num_blocks, num_kv_heads, block_size, head_dim].
struct HostPagedCache {
  int num_blocks = 0;
  int num_kv_heads = 0;
  int block_size = 0;
  int head_dim = 0;
  std::vector<float> k;
  std::vector<float> v;

  size_t Index(int block, int kv_head, int row, int dim) const {
    return ((static_cast<size_t>(block) * num_kv_heads + kv_head) * block_size + row) * head_dim +
           dim;
  }
};

// Causal attention of a variable-length batch over the cache. Sequence s owns
// queries [query_start[s], query_start[s+1]) of q ([total, num_q_heads,
// head_dim]); they are the last of its context_lens[s] tokens, so query i sits
// at position context_lens[s] - count + i and sees positions [0, position].
// Token t lives in block block_tables[s][t / block_size], row t % block_size.
// Returns [total, num_q_heads, head_dim].
// REQUIRES: num_q_heads divisible by cache.num_kv_heads; shapes consistent.
std::vector<double> ReferencePagedAttention(const std::vector<float>& q, int num_q_heads,
                                            const HostPagedCache& cache,
                                            const std::vector<std::vector<int32_t>>& block_tables,
                                            const std::vector<int32_t>& context_lens,
                                            const std::vector<int32_t>& query_start,
                                            double softmax_scale);

// Decode: one query per sequence attending to its whole context.
std::vector<double> ReferenceDecodeAttention(const std::vector<float>& q, int num_q_heads,
                                             const HostPagedCache& cache,
                                             const std::vector<std::vector<int32_t>>& block_tables,
                                             const std::vector<int32_t>& context_lens,
                                             double softmax_scale);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_ATTENTION_ATTENTION_REFERENCE_H_
