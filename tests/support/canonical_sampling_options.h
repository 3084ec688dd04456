#ifndef PAGODA_TESTS_SUPPORT_CANONICAL_SAMPLING_OPTIONS_H_
#define PAGODA_TESTS_SUPPORT_CANONICAL_SAMPLING_OPTIONS_H_

// SamplingOptions as bytes to compare, their penalty counts taken as a set:
// a worker that grows kept options by a SamplingDelta appends new token ids
// at the end, the server lists them in its own order, and the sampler sorts
// its edits by token id, so the order means nothing. For the tests that
// check resolved options against whole ones (server and worker sides).

#include <cstdint>
#include <map>
#include <string>

#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda {

inline std::string CanonicalSamplingOptions(const worker::v1::SamplingOptions& options) {
  std::map<int32_t, int32_t> counts;
  for (int i = 0; i < options.output_token_ids_size(); ++i) {
    counts[options.output_token_ids(i)] = options.output_token_counts(i);
  }
  worker::v1::SamplingOptions sorted = options;
  sorted.clear_output_token_ids();
  sorted.clear_output_token_counts();
  for (const auto& [id, count] : counts) {
    sorted.add_output_token_ids(id);
    sorted.add_output_token_counts(count);
  }
  return sorted.SerializeAsString();
}

}  // namespace pagoda

#endif  // PAGODA_TESTS_SUPPORT_CANONICAL_SAMPLING_OPTIONS_H_
