// SamplingOptions and StoppingOptions: the stop rule and the per-sequence seeds.

#include "scheduler/engine/sampling_options.h"

#include <algorithm>

namespace pagoda::scheduler {

int SamplingOptions::num_multi_token_bad_words() const {
  return static_cast<int>(
      std::count_if(bad_words_token_ids.begin(), bad_words_token_ids.end(),
                    [](const std::vector<int32_t>& word) { return word.size() > 1; }));
}

bool StoppingOptions::StopsAt(const std::vector<int32_t>& eos_token_ids, int num_output_tokens,
                              int32_t token) const {
  if (num_output_tokens < min_tokens) return false;
  const auto holds = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  return (!ignore_eos && holds(eos_token_ids)) || holds(stop_token_ids);
}

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t SeedForSequence(uint64_t request_seed, int index) {
  if (index == 0) return request_seed;
  return SplitMix64(request_seed ^ SplitMix64(static_cast<uint64_t>(index)));
}

}  // namespace pagoda::scheduler
