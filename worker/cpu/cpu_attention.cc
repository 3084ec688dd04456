#include "worker/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pagoda::worker {
namespace {

// A query block's rows (query tokens x the group's heads): with head_dim 128
// its queries and outputs take 24 KiB each, beside a key chunk's scores
// (12 KiB) and a packed K piece (8 KiB).
constexpr int kBlockRows = 48;

// One (sequence, kv head) of PagedAttention: where its K/V rows are and how
// to read them (16-bit and FP8 caches are widened to f32 by the kernels).
struct AttentionItem {
  const SimdKernels* simd;
  const char* key_cache;
  const char* value_cache;
  const int32_t* table;  // The sequence's block table.
  size_t block_elements;
  size_t width;
  DType dtype;
  int kv_head;
  int block_size;
  int head_dim;
  int group;    // Query heads per kv head.
  int context;  // Keys of the sequence, this step's included.
  int q_begin;  // The sequence's first query row in the step.
  int q_len;
  size_t query_stride;   // Floats between two query tokens' rows.
  size_t output_stride;  // The same for the (contiguous) output.
  // The score scale with an FP8 cache's k_scale folded in, and v_scale,
  // which scales the softmax weights (the kernels read the codes' values).
  float scale;
  float value_scale;

  // Byte offset of context token j's row for this kv head. Rows of one
  // cache block follow each other, head_dim elements apart.
  size_t RowOf(int j) const {
    return (table[j / block_size] * block_elements +
            (static_cast<size_t>(kv_head) * block_size + j % block_size) * head_dim) *
           width;
  }
  // Keys [j, j + RunAt(j, end)) lie in one cache block (so their rows are
  // contiguous) and at or before key `end`.
  int RunAt(int j, int end) const { return std::min(block_size - j % block_size, end + 1 - j); }
  // The first of the group's query rows of query token i, and of its output
  // rows: the group's heads are adjacent rows of head_dim floats.
  size_t FirstQueryRowOf(int i) const { return (q_begin + i) * query_stride + GroupOffset(); }
  size_t FirstOutputRowOf(int i) const { return (q_begin + i) * output_stride + GroupOffset(); }
  size_t GroupOffset() const { return static_cast<size_t>(kv_head) * group * head_dim; }
};

AttentionItem MakeItem(const SimdKernels& simd, const PagedAttentionParams& p, int64_t item) {
  const StepBatch& batch = *p.batch;
  const KvCacheLayer& cache = p.cache;
  const int s = static_cast<int>(item / cache.num_kv_heads);
  return AttentionItem{
      .simd = &simd,
      .key_cache = static_cast<const char*>(cache.key),
      .value_cache = static_cast<const char*>(cache.value),
      .table = batch.block_tables + static_cast<size_t>(s) * batch.max_blocks_per_seq,
      .block_elements = static_cast<size_t>(cache.num_kv_heads) * cache.block_size * cache.head_dim,
      .width = DTypeSize(cache.dtype),
      .dtype = cache.dtype,
      .kv_head = static_cast<int>(item % cache.num_kv_heads),
      .block_size = cache.block_size,
      .head_dim = cache.head_dim,
      .group = p.num_heads / cache.num_kv_heads,
      .context = batch.context_lens[s],
      .q_begin = batch.query_start[s],
      .q_len = batch.query_start[s + 1] - batch.query_start[s],
      .query_stride = static_cast<size_t>(
          p.query_token_stride != 0 ? p.query_token_stride : int64_t{p.num_heads} * cache.head_dim),
      .output_stride = static_cast<size_t>(p.num_heads) * cache.head_dim,
      .scale = p.scale * cache.k_scale,
      .value_scale = cache.v_scale};
}

// ---- Row by row ----

// Blocks are scattered in the cache, and a kv head's rows of one block are
// a short run (2 KiB for 16 f16 rows of 64) that the hardware prefetcher
// finds late: so the run kPrefetchBlocks blocks past key j is fetched while
// key j's run is computed. bench_cpu_attention (f16, 4k context, batch 8)
// ran 5-15 % faster with it, 1 and 2 blocks ahead alike, 8 no better.
constexpr int kPrefetchBlocks = 2;

// Always inlined: GCC's IPA finds a function whose only effect is a prefetch
// to have none, and drops its calls.
[[gnu::always_inline]] inline void PrefetchRunAhead(const AttentionItem& at, const char* cache,
                                                    int j, int ahead, int end) {
  const int next = (j / at.block_size + ahead) * at.block_size;
  if (next > end) return;
  const char* rows = cache + at.RowOf(next);
  const size_t bytes = static_cast<size_t>(at.RunAt(next, end)) * at.head_dim * at.width;
  for (size_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(rows + offset);
}

// Unscaled scores of keys [0, position] for each query head of the group
// (`queries`: group rows of head_dim floats), into score rows of
// at.context floats: four heads and a run of keys inside one cache block a
// call, so each key row is read once for the group.
void ScoreKeys(const AttentionItem& at, const float* queries, int position, float* scores) {
  const SimdKernels::Score4Fn score4 = at.simd->score4(at.dtype);
  for (int g = 0; g < at.group; g += 4) {
    for (int j = 0, run = 0; j <= position; j += run) {
      run = at.RunAt(j, position);
      PrefetchRunAhead(at, at.key_cache, j, kPrefetchBlocks, position);
      score4(at.key_cache + at.RowOf(j), at.head_dim, run, at.head_dim,
             queries + static_cast<size_t>(g) * at.head_dim, at.head_dim, std::min(4, at.group - g),
             scores + static_cast<size_t>(g) * at.context + j, at.context);
    }
  }
}

// Softmax of each head's scaled scores over keys [0, position], then the
// values weighted by it into that head's output row (`output`: group rows
// of head_dim floats), four heads at a time: each V row is read once for
// them, a run of rows inside one cache block a call.
// Scales a head's `n` scores in place and returns their max: eight running
// maxes, since one would chain every compare on the one before (at
// head_dim 16 the loop was a fifth of a decode step's attention).
float ScaleScoresToMax(float* row, int n, float scale) {
  constexpr int kLanes = 8;
  float lanes[kLanes];
  std::fill_n(lanes, kLanes, -INFINITY);
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      row[j + k] *= scale;
      lanes[k] = std::max(lanes[k], row[j + k]);
    }
  }
  for (; j < n; ++j) {
    row[j] *= scale;
    lanes[0] = std::max(lanes[0], row[j]);
  }
  return *std::max_element(lanes, lanes + kLanes);
}

void WeightValues(const AttentionItem& at, int position, float* scores, float* output) {
  const int head_dim = at.head_dim;
  for (int g = 0; g < at.group; ++g) {
    float* row_scores = scores + static_cast<size_t>(g) * at.context;
    const float max_score = ScaleScoresToMax(row_scores, position + 1, at.scale);
    const float inv =
        at.value_scale / at.simd->exp_sum(row_scores, max_score, row_scores, position + 1);
    for (int j = 0; j <= position; ++j) row_scores[j] *= inv;
  }
  std::fill_n(output, static_cast<size_t>(at.group) * head_dim, 0.0f);
  const SimdKernels::Weigh4Fn weigh4 = at.simd->weigh4(at.dtype);
  for (int g = 0; g < at.group; g += 4) {
    for (int j = 0, run = 0; j <= position; j += run) {
      run = at.RunAt(j, position);
      PrefetchRunAhead(at, at.value_cache, j, kPrefetchBlocks, position);
      weigh4(at.value_cache + at.RowOf(j), head_dim, run, head_dim,
             scores + static_cast<size_t>(g) * at.context + j, at.context,
             std::min(4, at.group - g), output + static_cast<size_t>(g) * head_dim, head_dim);
    }
  }
}

void AttendRowByRow(const AttentionItem& at, const float* query_base, float* output_base) {
  // One score row per query head of the group.
  thread_local std::vector<float> scores;  // Grows to the longest context once.
  scores.resize(static_cast<size_t>(at.group) * at.context);
  for (int i = 0; i < at.q_len; ++i) {
    const int position = at.context - at.q_len + i;  // Attends keys [0, position].
    ScoreKeys(at, query_base + at.FirstQueryRowOf(i), position, scores.data());
    WeightValues(at, position, scores.data(), output_base + at.FirstOutputRowOf(i));
  }
}

// ---- Head_dim 16, one row a call ----

// Row by row through the level's attend16: each query token's heads in
// turn, each over every key it sees (a head's K/V of one sequence, a few
// tens of KiB, stays in L2 for the next head of its group).
void AttendRowsOf16(const AttentionItem& at, SimdKernels::Attend16Fn attend16,
                    const float* query_base, float* output_base) {
  const size_t head_offset =
      static_cast<size_t>(at.kv_head) * at.block_size * at.head_dim * at.width;
  const size_t block_bytes = at.block_elements * at.width;
  for (int i = 0; i < at.q_len; ++i) {
    const int keys = at.context - at.q_len + i + 1;
    const float* queries = query_base + at.FirstQueryRowOf(i);
    float* outputs = output_base + at.FirstOutputRowOf(i);
    for (int g = 0; g < at.group; ++g) {
      attend16(at.key_cache + head_offset, at.value_cache + head_offset, at.table, block_bytes,
               at.block_size, keys, queries + g * at.head_dim, at.scale, at.value_scale,
               outputs + g * at.head_dim);
    }
  }
}

// ---- Blocked ----

// A key chunk is up to kChunkKeys keys, in pieces of up to kPieceKeys that
// each lie inside one cache block (so a piece's K and V rows are adjacent):
// a piece is one packed panel of scores; the softmax bookkeeping (max,
// rescaling the outputs) is paid once a chunk.
constexpr int kChunkKeys = 64;
constexpr int kPieceKeys = 16;  // The panel kernels' width.

// A query block's state: its scaled queries, its running softmax (max and
// sum per row) and unnormalised outputs, a key chunk's scores (then
// weights), a packed K piece and a widened V piece. Rows are query token t's
// head g at t * group + g.
struct BlockScratch {
  std::vector<float> queries, outputs, scores, max, sum, panel, values;
  int rows = 0;
  int first_position = 0;  // Position of the block's first query token.

  void Reset(const AttentionItem& at, int tokens, int first_position_in) {
    rows = tokens * at.group;
    first_position = first_position_in;
    const size_t width = static_cast<size_t>(rows) * at.head_dim;
    queries.resize(width);
    outputs.assign(width, 0.0f);
    scores.resize(static_cast<size_t>(rows) * kChunkKeys);
    max.assign(rows, -INFINITY);
    sum.assign(rows, 0.0f);
    panel.resize(static_cast<size_t>(at.head_dim) * kPieceKeys);
    values.resize(static_cast<size_t>(kPieceKeys) * at.head_dim);
  }
};

// Keys in the piece starting at key j, at most `left`: up to the end of j's
// cache block and kPieceKeys.
int PieceAt(const AttentionItem& at, int j, int left) {
  return std::min(kPieceKeys, at.RunAt(j, j + left - 1));
}

// Scores of keys [first, first + keys) for every row into scores columns
// [0, keys), masked where a key lies past its row's position.
void ScoreChunk(const AttentionItem& at, BlockScratch& b, int first, int keys) {
  const int head_dim = at.head_dim;
  for (int offset = 0, piece = 0; offset < keys; offset += piece) {
    piece = PieceAt(at, first + offset, keys - offset);
    at.simd->pack16(at.dtype)(at.key_cache + at.RowOf(first + offset), head_dim, piece, head_dim,
                              b.panel.data());
    for (int r = 0, n = 0; r < b.rows; r += n) {
      n = GemmRowsFor(b.rows - r);
      at.simd->gemm6x16(b.panel.data(), kPieceKeys, head_dim, b.queries.data() + r * head_dim,
                        head_dim, n, b.scores.data() + r * kChunkKeys + offset, kChunkKeys, piece,
                        /*accumulate=*/false);
    }
  }
  if (first + keys - 1 <= b.first_position) return;  // Every key visible to every row.
  for (int r = 0; r < b.rows; ++r) {
    const int position = b.first_position + r / at.group;
    for (int c = std::max(0, position + 1 - first); c < keys; ++c) {
      b.scores[r * kChunkKeys + c] = -INFINITY;
    }
  }
}

// Turns the chunk's scores into weights against each row's running max,
// rescaling what the row has summed so far where the max grew.
void SoftmaxChunk(const AttentionItem& at, BlockScratch& b, int keys) {
  for (int r = 0; r < b.rows; ++r) {
    float* row = b.scores.data() + r * kChunkKeys;
    float chunk_max = -INFINITY;
    for (int c = 0; c < keys; ++c) chunk_max = row[c] > chunk_max ? row[c] : chunk_max;
    if (chunk_max == -INFINITY) {  // Every key masked for this row.
      std::fill_n(row, keys, 0.0f);
      continue;
    }
    const float new_max = std::max(b.max[r], chunk_max);
    const float rescale = std::exp(b.max[r] - new_max);  // 0 for the first chunk.
    b.sum[r] = b.sum[r] * rescale + at.simd->exp_sum(row, new_max, row, keys);
    if (rescale != 1.0f) {
      float* out = b.outputs.data() + static_cast<size_t>(r) * at.head_dim;
      for (int d = 0; d < at.head_dim; ++d) out[d] *= rescale;
    }
    b.max[r] = new_max;
  }
}

// outputs += weights x V of keys [first, first + keys), a piece at a time,
// read in place (16-bit and FP8 caches widened first), 16 output columns at
// a time.
void AccumulateValues(const AttentionItem& at, BlockScratch& b, int first, int keys) {
  const int head_dim = at.head_dim;
  for (int offset = 0, piece = 0; offset < keys; offset += piece) {
    piece = PieceAt(at, first + offset, keys - offset);
    const char* rows = at.value_cache + at.RowOf(first + offset);
    const float* values = reinterpret_cast<const float*>(rows);
    if (at.dtype != DType::kF32) {
      at.simd->widen(at.dtype)(rows, b.values.data(), static_cast<size_t>(piece) * head_dim);
      values = b.values.data();
    }
    for (int c = 0; c < head_dim; c += kPieceKeys) {
      for (int r = 0, n = 0; r < b.rows; r += n) {
        n = GemmRowsFor(b.rows - r);
        at.simd->gemm6x16(values + c, head_dim, piece, b.scores.data() + r * kChunkKeys + offset,
                          kChunkKeys, n, b.outputs.data() + r * head_dim + c, head_dim, kPieceKeys,
                          /*accumulate=*/true);
      }
    }
  }
}

// Query tokens [first, first + tokens) of the item over every key they see.
void AttendQueryBlock(const AttentionItem& at, const float* query_base, float* output_base,
                      int first, int tokens, BlockScratch& b) {
  const int head_dim = at.head_dim;
  const size_t group_width = static_cast<size_t>(at.group) * head_dim;
  b.Reset(at, tokens, at.context - at.q_len + first);
  for (int t = 0; t < tokens; ++t) {
    const float* src = query_base + at.FirstQueryRowOf(first + t);
    float* dst = b.queries.data() + t * group_width;
    for (size_t i = 0; i < group_width; ++i) dst[i] = src[i] * at.scale;
  }
  const int last_key = b.first_position + tokens - 1;
  for (int j = 0; j <= last_key; j += kChunkKeys) {
    const int keys = std::min(kChunkKeys, last_key + 1 - j);
    ScoreChunk(at, b, j, keys);
    SoftmaxChunk(at, b, keys);
    AccumulateValues(at, b, j, keys);
  }
  for (int t = 0; t < tokens; ++t) {
    float* dst = output_base + at.FirstOutputRowOf(first + t);
    for (int g = 0; g < at.group; ++g) {
      const int r = t * at.group + g;
      const float inv = at.value_scale / b.sum[r];
      const float* out = b.outputs.data() + static_cast<size_t>(r) * head_dim;
      for (int d = 0; d < head_dim; ++d) dst[g * head_dim + d] = out[d] * inv;
    }
  }
}

void AttendBlocked(const AttentionItem& at, const float* query_base, float* output_base) {
  thread_local BlockScratch scratch;
  const int tokens_per_block = std::max(1, kBlockRows / at.group);
  for (int first = 0; first < at.q_len; first += tokens_per_block) {
    AttendQueryBlock(at, query_base, output_base, first,
                     std::min(tokens_per_block, at.q_len - first), scratch);
  }
}

}  // namespace

void AttendItem(const SimdKernels& simd, const PagedAttentionParams& p, int64_t item) {
  const AttentionItem at = MakeItem(simd, p, item);
  const float* query_base = static_cast<const float*>(p.query);
  float* output_base = static_cast<float*>(p.output);
  if (simd.gemm6x16 != nullptr && at.head_dim % kPieceKeys == 0 &&
      at.q_len * at.group >= simd.blocked_attention_min_rows) {
    AttendBlocked(at, query_base, output_base);
  } else if (const auto attend16 = simd.attend16(at.dtype);
             attend16 != nullptr && at.head_dim == 16) {
    AttendRowsOf16(at, attend16, query_base, output_base);
  } else {
    AttendRowByRow(at, query_base, output_base);
  }
}

}  // namespace pagoda::worker
