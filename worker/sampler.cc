#include "worker/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "worker/cpu/simd.h"
#include "worker/gumbel_draw.h"
#include "worker/sampling_thresholds.h"

namespace pagoda::worker {
namespace {

float LoadLogit(float x) { return std::isnan(x) ? -INFINITY : x; }

uint32_t OrderedKey(float x) { return OrderedFloatKey(x); }

// sum(exp(x - max_logit)) in double over the row (NaN as -inf), by the
// CPU's widest float64 exp (each term within 1 ulp of std::exp's, simd.h):
// a scalar std::exp per vocabulary entry was most of a greedy row's time.
double RowExpSum(absl::Span<const float> logits, float max_logit) {
  static const auto exp_sum_f64 = BestSimdKernels().exp_sum_f64;
  return exp_sum_f64(logits.data(), max_logit, logits.size());
}

// log(sum(exp(x))) in double, stable. -inf when every logit is.
double LogSumExp(absl::Span<const float> logits, float max_logit) {
  if (max_logit == -INFINITY) return -INFINITY;
  return max_logit + std::log(RowExpSum(logits, max_logit));
}

// The key of the lowest logit that survives min_p: tokens at or above it
// pass PassesMinP (monotone in x).
uint32_t MinPThreshold(absl::Span<const float> logits, float max_logit, float inv_t, float min_p) {
  const float log_min_p = std::log(min_p);
  uint32_t threshold = ~0u;
  for (float raw : logits) {
    const float x = LoadLogit(raw);
    if (x > -INFINITY && PassesMinP(x, max_logit, inv_t, log_min_p)) {
      threshold = std::min(threshold, OrderedKey(x));
    }
  }
  return threshold;
}

// The token the rule picks from (processed) logits whose maximum is
// logits[argmax] = max_logit: greedy, or min_p, top-k, top-p and a draw.
int32_t ChooseToken(absl::Span<const float> logits, float max_logit, int32_t argmax,
                    const RowSamplingParams& params) {
  const int vocab = static_cast<int>(logits.size());
  if (params.temperature < kGreedyTemperature || max_logit == -INFINITY) return argmax;
  const float inv_t = 1.0f / params.temperature;
  uint32_t threshold = 0;
  if (params.min_p > 0.0f) threshold = MinPThreshold(logits, max_logit, inv_t, params.min_p);
  if (params.top_k > 0 && params.top_k < vocab) {
    threshold = std::max(threshold, TopKThreshold(logits, params.top_k));
  }
  if (params.top_p > 0.0f && params.top_p < 1.0f) {
    threshold = TopPThreshold(logits, threshold, max_logit, inv_t, params.top_p);
  }
  return GumbelMaxDraw(logits, argmax, threshold, max_logit, inv_t, params.seed,
                       params.sample_index);
}

struct ArgMax {
  float value = -INFINITY;
  int32_t id = 0;
  // Lowest id on ties, whatever order candidates come in.
  void Offer(float x, int32_t i) {
    if (x > value || (x == value && i < id)) {
      value = x;
      id = i;
    }
  }
};

// The row's maximum (NaN as -inf) at its lowest id; -inf at 0 when none.
// By the CPU's widest argmax (simd.h): a scalar scan is a chain of dependent
// compares bound by their latency, most of a greedy row's sampling once the
// log-sum-exp was vectorized, and of a drawn row's once its noise was pruned.
ArgMax RowArgMax(absl::Span<const float> logits) {
  static const auto argmax = BestSimdKernels().argmax;
  ArgMax best;
  best.id = static_cast<int32_t>(argmax(logits.data(), logits.size(), &best.value));
  return best;
}

// The `count` largest raw logits, descending, lowest id first on ties.
void TopLogits(absl::Span<const float> logits, int count, std::vector<int32_t>& ids,
               std::vector<float>& values) {
  ids.resize(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    const float x = LoadLogit(logits[a]), y = LoadLogit(logits[b]);
    return x > y || (x == y && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + count, ids.end(), before);
  ids.resize(count);
  values.resize(count);
  for (int i = 0; i < count; ++i) values[i] = LoadLogit(logits[ids[i]]);
}

// `chosen_logit` and `top_values` are logits of the row the logprobs are
// taken from (raw, or processed), `log_normalizer` its log-sum-exp.
void WriteOutput(int32_t chosen, float chosen_logit, double log_normalizer,
                 const std::vector<int32_t>& top_ids, const std::vector<float>& top_values,
                 const RowSampleOutput& out) {
  *out.token_id = chosen;
  *out.logprob = static_cast<float>(chosen_logit - log_normalizer);
  for (size_t i = 0; i < top_ids.size(); ++i) {
    out.top_ids[i] = top_ids[i];
    out.top_logprobs[i] = static_cast<float>(top_values[i] - log_normalizer);
  }
}

// The raw log-normalizer and the processed row, in place: edited tokens are
// first set to -inf, so one pass finds the unedited maximum and sums the
// unedited raw masses; the edited raw masses are added from `raw`, then the
// processed values written. Returns the processed argmax.
ArgMax ProcessInPlace(absl::Span<float> logits, const RowSamplingParams& params, float raw_max,
                      const std::vector<float>& raw, double* log_normalizer) {
  const bool finite_max = raw_max > -INFINITY;
  ArgMax best;
  double sum = 0.0;
  if (params.penalties.allowed_only) {
    // Every token but the edited ones is masked: the row is rewritten anyway.
    if (finite_max) sum = RowExpSum(logits, raw_max);
    std::fill(logits.begin(), logits.end(), -INFINITY);
  } else {
    for (const LogitEdit& edit : params.edits) logits[edit.token_id] = -INFINITY;
    best = RowArgMax(logits);
    if (finite_max) sum = RowExpSum(logits, raw_max) + RowExpSum(raw, raw_max);
  }
  *log_normalizer = finite_max ? raw_max + std::log(sum) : -INFINITY;
  for (size_t j = 0; j < params.edits.size(); ++j) {
    const LogitEdit& edit = params.edits[j];
    const float x = ProcessLogit(raw[j], edit, params.penalties);
    logits[edit.token_id] = x;
    best.Offer(x, edit.token_id);
  }
  return best;
}

bool HasEdits(const RowSamplingParams& params) {
  return !params.edits.empty() || params.penalties.allowed_only || !params.token_mask.empty();
}

// Structured outputs: every token the row's mask refuses becomes -inf (it
// commutes with the edits, which only ever lower a refused token's chance
// to nothing); returns the argmax of what is left.
ArgMax ApplyTokenMask(absl::Span<float> logits, absl::Span<const uint32_t> mask) {
  ArgMax best;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!TokenMaskAllows(mask.data(), static_cast<int32_t>(i))) {
      logits[i] = -INFINITY;
      continue;
    }
    const float x = LoadLogit(logits[i]);
    if (x > best.value) {
      best.value = x;
      best.id = static_cast<int32_t>(i);
    }
  }
  return best;
}

}  // namespace

void SampleRowInPlace(absl::Span<float> logits, const RowSamplingParams& params,
                      const RowSampleOutput& out) {
  if (!HasEdits(params)) return SampleRow(absl::Span<const float>(logits), params, out);
  thread_local std::vector<int32_t> top_ids;
  thread_local std::vector<float> top_values, raw;
  const ArgMax raw_best = RowArgMax(logits);
  top_ids.clear();
  top_values.clear();
  const int count = std::min<int>(params.num_logprobs, logits.size());
  if (count > 0) TopLogits(logits, count, top_ids, top_values);
  raw.clear();
  for (const LogitEdit& edit : params.edits) raw.push_back(logits[edit.token_id]);
  double log_normalizer = 0.0;
  ArgMax best = ProcessInPlace(logits, params, raw_best.value, raw, &log_normalizer);
  if (!params.token_mask.empty()) best = ApplyTokenMask(logits, params.token_mask);
  int32_t chosen = raw_best.id;
  float chosen_raw = raw_best.value;
  if (best.value > -INFINITY) {
    chosen = ChooseToken(logits, best.value, best.id, params);
    const auto edit =
        std::lower_bound(params.edits.begin(), params.edits.end(), chosen,
                         [](const LogitEdit& e, int32_t id) { return e.token_id < id; });
    const bool edited = edit != params.edits.end() && edit->token_id == chosen;
    chosen_raw = edited ? LoadLogit(raw[edit - params.edits.begin()]) : logits[chosen];
    if (params.processed_logprobs) {
      // Beam search: the logprobs of what the choice reads.
      if (count > 0) TopLogits(logits, count, top_ids, top_values);
      log_normalizer = LogSumExp(logits, best.value);
      chosen_raw = logits[chosen];
    }
  }
  WriteOutput(chosen, chosen_raw, log_normalizer, top_ids, top_values, out);
}

void SampleRow(absl::Span<const float> logits, const RowSamplingParams& params,
               const RowSampleOutput& out) {
  if (HasEdits(params)) {
    thread_local std::vector<float> copy;
    copy.assign(logits.begin(), logits.end());
    return SampleRowInPlace(absl::MakeSpan(copy), params, out);
  }
  const ArgMax best = RowArgMax(logits);
  const int32_t chosen = ChooseToken(logits, best.value, best.id, params);
  const double log_normalizer = LogSumExp(logits, best.value);
  thread_local std::vector<int32_t> top_ids;
  thread_local std::vector<float> top_values;
  top_ids.clear();
  top_values.clear();
  const int count = std::min<int>(params.num_logprobs, logits.size());
  if (count > 0) TopLogits(logits, count, top_ids, top_values);
  WriteOutput(chosen, LoadLogit(logits[chosen]), log_normalizer, top_ids, top_values, out);
}

}  // namespace pagoda::worker
