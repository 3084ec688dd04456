#include "kernels/attention/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagoda::kernels {

std::vector<double> ReferencePagedAttention(const std::vector<float>& q, int num_q_heads,
                                            const HostPagedCache& cache,
                                            const std::vector<std::vector<int32_t>>& block_tables,
                                            const std::vector<int32_t>& context_lens,
                                            const std::vector<int32_t>& query_start,
                                            double softmax_scale) {
  const int head_dim = cache.head_dim;
  const int group = num_q_heads / cache.num_kv_heads;
  const int total = query_start.back();
  std::vector<double> out(static_cast<size_t>(total) * num_q_heads * head_dim, 0.0);
  std::vector<double> scores;
  for (size_t s = 0; s + 1 < query_start.size(); ++s) {
    const int count = query_start[s + 1] - query_start[s];
    const int context_len = context_lens[s];
    for (int i = 0; i < count; ++i) {
      const int token_index = query_start[s] + i;
      const int position = context_len - count + i;
      for (int h = 0; h < num_q_heads; ++h) {
        const int kv_head = h / group;
        const float* query = &q[(static_cast<size_t>(token_index) * num_q_heads + h) * head_dim];
        scores.assign(position + 1, 0.0);
        for (int t = 0; t <= position; ++t) {
          const int block = block_tables[s][t / cache.block_size];
          const float* key = &cache.k[cache.Index(block, kv_head, t % cache.block_size, 0)];
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(query[d]) * key[d];
          scores[t] = dot * softmax_scale;
        }
        const double max_score = *std::max_element(scores.begin(), scores.end());
        double sum = 0.0;
        for (double& score : scores) {
          score = std::exp(score - max_score);
          sum += score;
        }
        double* dst = &out[(static_cast<size_t>(token_index) * num_q_heads + h) * head_dim];
        for (int t = 0; t <= position; ++t) {
          const int block = block_tables[s][t / cache.block_size];
          const float* value = &cache.v[cache.Index(block, kv_head, t % cache.block_size, 0)];
          const double weight = scores[t] / sum;
          for (int d = 0; d < head_dim; ++d) dst[d] += weight * value[d];
        }
      }
    }
  }
  return out;
}

std::vector<double> ReferenceDecodeAttention(const std::vector<float>& q, int num_q_heads,
                                             const HostPagedCache& cache,
                                             const std::vector<std::vector<int32_t>>& block_tables,
                                             const std::vector<int32_t>& context_lens,
                                             double softmax_scale) {
  std::vector<int32_t> query_start(context_lens.size() + 1);
  std::iota(query_start.begin(), query_start.end(), 0);
  return ReferencePagedAttention(q, num_q_heads, cache, block_tables, context_lens, query_start,
                                 softmax_scale);
}

}  // namespace pagoda::kernels
