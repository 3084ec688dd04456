#ifndef PAGODA_SCHEDULER_ENGINE_GENERATED_TOKEN_H_
#define PAGODA_SCHEDULER_ENGINE_GENERATED_TOKEN_H_

// A token the workers returned with its logprob and top alternatives: what a
// sequence's output and a prompt's logprobs are made of.

#include <cstdint>
#include <vector>

namespace pagoda::scheduler {

struct TopLogprob {
  int32_t token_id;
  float logprob;
};

// One generated token with its logprob and (if asked) the top alternatives.
struct GeneratedToken {
  int32_t token_id;
  float logprob;
  std::vector<TopLogprob> top;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_GENERATED_TOKEN_H_
