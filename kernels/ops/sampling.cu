#include <cfloat>
#include <cstdint>

#include "common/logits_processing.h"
#include "kernels/ops/philox.h"
#include "kernels/ops/sampling.h"

namespace pagoda::kernels {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct Shared {
  unsigned long long histogram[256];
  float top_values[kMaxTopLogprobs];
  int32_t top_ids[kMaxTopLogprobs];
  int top_count;
  int ties_taken;
  int warp_ties[kWarps];
  uint32_t digit;
  unsigned int min_key;
  unsigned long long remaining;
  // Scratch for block reductions.
  float warp_value[kWarps];
  float warp_sum[kWarps];
  int warp_index[kWarps];
  unsigned long long warp_u64[kWarps];
};

__device__ __forceinline__ float LoadLogit(const float* row, int i) {
  const float x = row[i];
  return x != x ? -INFINITY : x;
}

// Monotone map from float to unsigned: a < b  <=>  Key(a) < Key(b).
__device__ __forceinline__ uint32_t OrderedKey(float x) {
  const uint32_t bits = __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// Element loop used by every pass: thread t sees ids 4t..4t+3, then the next
// 4 * blockDim. Groups of 4 match one Philox call.
template <typename Body>
__device__ __forceinline__ void ForEachLogit(const float* row, int vocab, Body&& body) {
  for (int base = threadIdx.x * 4; base < vocab; base += blockDim.x * 4) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (base + e < vocab) body(base + e, LoadLogit(row, base + e));
    }
  }
}

// (value, index) maximum over a warp, lowest index on ties; every lane gets it.
__device__ __forceinline__ void WarpArgMax(float& value, int& index) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_value = __shfl_xor_sync(0xffffffffu, value, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    if (other_value > value || (other_value == value && other_index < index)) {
      value = other_value;
      index = other_index;
    }
  }
}

// (value, index) maximum, lowest index on ties; every thread gets the result.
__device__ void BlockArgMax(float& value, int& index, Shared& s) {
  WarpArgMax(value, index);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) {
    s.warp_value[warp] = value;
    s.warp_index[warp] = index;
  }
  __syncthreads();
  value = s.warp_value[lane];
  index = s.warp_index[lane];
  WarpArgMax(value, index);
}

// Combines running softmax statistics (max m, sum of exp(x - m)).
__device__ __forceinline__ void MergeSoftmax(float& m, float& sum, float other_m, float other_sum) {
  const float new_m = fmaxf(m, other_m);
  if (new_m == -INFINITY) return;  // Both empty.
  sum = sum * __expf(m - new_m) + other_sum * __expf(other_m - new_m);
  m = new_m;
}

__device__ __forceinline__ void WarpSoftmaxStats(float& m, float& sum) {
  for (int offset = 16; offset > 0; offset /= 2) {
    MergeSoftmax(m, sum, __shfl_xor_sync(0xffffffffu, m, offset),
                 __shfl_xor_sync(0xffffffffu, sum, offset));
  }
}

__device__ void BlockSoftmaxStats(float& m, float& sum, Shared& s) {
  WarpSoftmaxStats(m, sum);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) {
    s.warp_value[warp] = m;
    s.warp_sum[warp] = sum;
  }
  __syncthreads();
  m = s.warp_value[lane];
  sum = s.warp_sum[lane];
  WarpSoftmaxStats(m, sum);
}

__device__ unsigned long long BlockSumU64(unsigned long long value, Shared& s) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) s.warp_u64[warp] = value;
  __syncthreads();
  value = s.warp_u64[lane];
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// The smallest key over the block; every thread gets it.
__device__ uint32_t BlockMinKey(uint32_t key, Shared& s) {
  __syncthreads();
  if (threadIdx.x == 0) s.min_key = ~0u;
  __syncthreads();
  atomicMin(&s.min_key, key);
  __syncthreads();
  return s.min_key;
}

// min_p's cut (PassesMinP, after temperature): the key of the lowest
// surviving logit.
__device__ uint32_t MinPThreshold(const float* row, int vocab, float max_logit, float inv_t,
                                  float min_p, Shared& s) {
  const float log_min_p = logf(min_p);
  uint32_t key = ~0u;
  ForEachLogit(row, vocab, [&](int, float x) {
    if (x > -INFINITY && PassesMinP(x, max_logit, inv_t, log_min_p)) key = min(key, OrderedKey(x));
  });
  return BlockMinKey(key, s);
}

// Largest key K such that the weight of {i : key_i >= K, key_i >= min_key}
// reaches `target`, found one 8-bit digit at a time (4 passes over the row).
// Weights are integers, so the histogram is exact and order-independent.
// REQUIRES: target >= 1 and at most the total weight over key >= min_key.
template <typename Weight>
__device__ uint32_t RadixSelectDescending(const float* row, int vocab, uint32_t min_key,
                                          unsigned long long target, Weight weight, Shared& s) {
  uint32_t prefix = 0, prefix_mask = 0;
  unsigned long long remaining = target;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) s.histogram[b] = 0;
    __syncthreads();
    ForEachLogit(row, vocab, [&](int i, float x) {
      const uint32_t key = OrderedKey(x);
      if (key >= min_key && (key & prefix_mask) == prefix) {
        const unsigned long long w = weight(x);
        if (w != 0) atomicAdd(&s.histogram[(key >> shift) & 255u], w);
      }
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long above = 0;
      uint32_t digit = 0;
      for (int b = 255; b >= 0; --b) {
        if (above + s.histogram[b] >= remaining) {
          digit = b;
          break;
        }
        above += s.histogram[b];
      }
      s.digit = digit;
      s.remaining = remaining - above;
    }
    __syncthreads();
    prefix |= s.digit << shift;
    prefix_mask |= 255u << shift;
    remaining = s.remaining;
  }
  return prefix;
}

// Writes the `count` largest logits (lowest id first among equals) as
// log-probabilities, given the row's log-sum-exp.
__device__ void WriteTopLogprobs(const float* row, int vocab, int count, float log_sum_exp,
                                 int32_t* out_ids, float* out_logprobs, Shared& s) {
  const uint32_t kth_key = RadixSelectDescending(
      row, vocab, 0u, static_cast<unsigned long long>(count), [](float) { return 1ull; }, s);
  if (threadIdx.x == 0) {
    s.top_count = 0;
    s.ties_taken = 0;
  }
  __syncthreads();
  // Strictly larger ones: fewer than `count`, any order (sorted below).
  ForEachLogit(row, vocab, [&](int i, float x) {
    if (OrderedKey(x) > kth_key) {
      const int slot = atomicAdd(&s.top_count, 1);
      s.top_values[slot] = x;
      s.top_ids[slot] = i;
    }
  });
  __syncthreads();
  const int greater = s.top_count;
  const int ties_needed = count - greater;
  // Ties at the k-th value: the lowest ids, so scan tiles in id order and rank
  // the ties of each tile with a ballot.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int tile = 0; tile < vocab; tile += blockDim.x) {
    const int i = tile + threadIdx.x;
    const bool tie = i < vocab && OrderedKey(LoadLogit(row, i)) == kth_key;
    const unsigned ballot = __ballot_sync(0xffffffffu, tie);
    if (lane == 0) s.warp_ties[warp] = __popc(ballot);
    __syncthreads();
    const int taken = s.ties_taken;
    int rank = taken + __popc(ballot & ((1u << lane) - 1u));
    int tile_total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) rank += s.warp_ties[w];
      tile_total += s.warp_ties[w];
    }
    if (tie && rank < ties_needed) {
      s.top_values[greater + rank] = LoadLogit(row, i);
      s.top_ids[greater + rank] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) s.ties_taken = taken + tile_total;
    __syncthreads();
    if (s.ties_taken >= ties_needed) break;
  }
  if (threadIdx.x == 0) {
    // Insertion sort of at most 20 entries: logit descending, id ascending.
    for (int a = 1; a < count; ++a) {
      const float v = s.top_values[a];
      const int32_t id = s.top_ids[a];
      int b = a - 1;
      while (b >= 0 && (s.top_values[b] < v || (s.top_values[b] == v && s.top_ids[b] > id))) {
        s.top_values[b + 1] = s.top_values[b];
        s.top_ids[b + 1] = s.top_ids[b];
        --b;
      }
      s.top_values[b + 1] = v;
      s.top_ids[b + 1] = id;
    }
    for (int a = 0; a < count; ++a) {
      out_ids[a] = s.top_ids[a];
      out_logprobs[a] = s.top_values[a] - log_sum_exp;
    }
  }
}

__global__ void __launch_bounds__(kThreads) TokenSamplingKernel(TokenSamplingParams p) {
  __shared__ Shared s;
  const int r = blockIdx.x;
  const int vocab = p.vocab_size;
  const float* row = p.logits + r * p.logits_stride;
  // The processed row when there is one: every choice reads it, the
  // logprobs read the raw row unless the row asks for the processed one.
  const bool processed = p.sampling_logits != nullptr;
  const float* srow = processed ? p.sampling_logits + int64_t{r} * vocab : row;
  const bool processed_logprobs =
      processed && p.processed_logprobs != nullptr && p.processed_logprobs[r] != 0;

  // Pass 1: argmax (processed) and the softmax statistics of the logprobs' row.
  float best = -INFINITY, raw_best = -INFINITY;
  int best_id = 0, raw_best_id = 0;
  float m = -INFINITY, sum = 0.0f;
  ForEachLogit(row, vocab, [&](int i, float x) {
    if (x > raw_best) {  // Ascending ids per thread: strict > keeps the lowest.
      raw_best = x;
      raw_best_id = i;
    }
    const float y = processed ? LoadLogit(srow, i) : x;
    MergeSoftmax(m, sum, processed_logprobs ? y : x, 1.0f);
    if (y > best) {
      best = y;
      best_id = i;
    }
  });
  BlockArgMax(best, best_id, s);
  if (processed) BlockArgMax(raw_best, raw_best_id, s);  // Uniform per block.
  BlockSoftmaxStats(m, sum, s);
  // Nothing the request allows survives: the model's own argmax, and the
  // raw row's logprobs (best is uniform per block, so is this branch).
  const float* lrow = processed_logprobs && best > -INFINITY ? srow : row;
  if (processed_logprobs && best == -INFINITY) {
    m = -INFINITY;
    sum = 0.0f;
    ForEachLogit(row, vocab, [&](int, float x) { MergeSoftmax(m, sum, x, 1.0f); });
    BlockSoftmaxStats(m, sum, s);
  }
  const float log_sum_exp = m + logf(sum);
  if (processed && best == -INFINITY) best_id = raw_best_id;

  int32_t chosen = best_id;
  int candidates = 1;
  const float temperature = p.temperatures[r];
  if (temperature >= kGreedyTemperature && best > -INFINITY) {
    const float inv_t = 1.0f / temperature;
    const float max_logit = best;
    auto mass = [=](float x) -> unsigned long long {
      return __float2ull_rd(__expf((x - max_logit) * inv_t) * kTopPMassScale);
    };
    uint32_t threshold = 0;
    const float min_p = p.min_p != nullptr ? p.min_p[r] : 0.0f;
    if (min_p > 0.0f) threshold = MinPThreshold(srow, vocab, max_logit, inv_t, min_p, s);
    const int k = p.top_k != nullptr ? p.top_k[r] : 0;
    if (k > 0 && k < vocab) {
      // Top-k of min_p's survivors: both keep a top set, so the smaller cut.
      threshold = max(threshold, RadixSelectDescending(
                                     srow, vocab, 0u, static_cast<unsigned long long>(k),
                                     [](float) { return 1ull; }, s));
    }
    const float top_p = p.top_p != nullptr ? p.top_p[r] : 1.0f;
    if (top_p > 0.0f && top_p < 1.0f) {
      unsigned long long kept_mass = 0;
      ForEachLogit(srow, vocab, [&](int, float x) {
        if (OrderedKey(x) >= threshold) kept_mass += mass(x);
      });
      kept_mass = BlockSumU64(kept_mass, s);
      unsigned long long target =
          static_cast<unsigned long long>(ceil(static_cast<double>(top_p) * kept_mass));
      if (target < 1) target = 1;
      if (target > kept_mass) target = kept_mass;
      threshold = RadixSelectDescending(srow, vocab, threshold, target, mass, s);
    }
    // Gumbel-max over the survivors: argmax of x / T + Gumbel noise.
    const uint64_t seed = p.seeds[r];
    const uint64_t stream_index = p.sample_indices != nullptr ? p.sample_indices[r] : 0;
    float best_score = -INFINITY;
    int best_score_id = vocab;  // Replaced by any survivor; max_logit's survives.
    int kept = 0;
    for (int base = threadIdx.x * 4; base < vocab; base += blockDim.x * 4) {
      const Philox4x32Block draws = PhiloxDraws(seed, stream_index, base / 4);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = base + e;
        if (i >= vocab) break;
        const float x = LoadLogit(srow, i);
        if (OrderedKey(x) < threshold || x == -INFINITY) continue;
        ++kept;
        const float gumbel = -logf(-logf(UniformOpen01(draws.v[e])));
        // An explicit fma, as worker/sampler.cc computes it: parity with the
        // host must not depend on nvcc choosing to contract a * b + c.
        const float score = __fmaf_rn(x - max_logit, inv_t, gumbel);
        if (score > best_score) {
          best_score = score;
          best_score_id = i;
        }
      }
    }
    BlockArgMax(best_score, best_score_id, s);
    // No survivor won when max_logit is +inf (every survivor's score is then
    // NaN or -inf) or when the top-p masses wrapped past 2^64: fall back to the
    // argmax, as the host sampler does, never to the out-of-range id `vocab`.
    chosen = best_score_id < vocab ? best_score_id : best_id;
    if (p.num_candidates != nullptr) {
      candidates = static_cast<int>(BlockSumU64(static_cast<unsigned long long>(kept), s));
    }
  }

  if (threadIdx.x == 0) {
    p.sampled_ids[r] = chosen;
    if (p.sampled_logprobs != nullptr) {
      p.sampled_logprobs[r] = LoadLogit(lrow, chosen) - log_sum_exp;
    }
    if (p.num_candidates != nullptr) p.num_candidates[r] = candidates;
  }
  const int count = p.num_logprobs < vocab ? p.num_logprobs : vocab;
  if (count > 0) {
    WriteTopLogprobs(lrow, vocab, count, log_sum_exp, p.top_ids + int64_t{r} * p.num_logprobs,
                     p.top_logprobs + int64_t{r} * p.num_logprobs, s);
  }
}

}  // namespace

cudaError_t LaunchTokenSampling(const TokenSamplingParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.vocab_size <= 0 || p.vocab_size > kMaxSamplingVocab ||
      p.logits_stride < p.vocab_size ||
      p.logits == nullptr || p.temperatures == nullptr || p.seeds == nullptr ||
      p.sampled_ids == nullptr || p.num_logprobs < 0 || p.num_logprobs > kMaxTopLogprobs ||
      (p.num_logprobs > 0 && (p.top_ids == nullptr || p.top_logprobs == nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (p.num_rows == 0) return cudaSuccess;
  TokenSamplingKernel<<<p.num_rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pagoda::kernels
