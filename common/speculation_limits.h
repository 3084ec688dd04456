#ifndef PAGODA_COMMON_SPECULATION_LIMITS_H_
#define PAGODA_COMMON_SPECULATION_LIMITS_H_

// Speculative decoding's bound, shared by the server's --speculative-config
// check and the worker's step-plan check, so the two can never disagree.
// Dependency-free, like common/sampling_limits.h.

namespace pagoda {

// The most draft tokens one sequence may carry in a step (vLLM's
// num_speculative_tokens). Every draft is a query row and a logits row of
// the verify step, and acceptance decays geometrically with the position,
// so past a handful the extra rows cost more than they can return; 16
// leaves room for tree-free EAGLE chains while bounding a hostile plan.
inline constexpr int kMaxSpeculativeTokens = 16;

}  // namespace pagoda

#endif  // PAGODA_COMMON_SPECULATION_LIMITS_H_
