#ifndef PAGODA_SCHEDULER_ENGINE_CONSTRAINT_STATE_H_
#define PAGODA_SCHEDULER_ENGINE_CONSTRAINT_STATE_H_

// ConstraintState: where a sequence's output stands in its request's grammar
// (structured outputs). Each Sequence holds one; constraint_mask.h advances
// it and is the only code that reads it.

#include <optional>

#include "scheduler/constraints/matcher.h"

namespace pagoda::scheduler {

// Derived from the tokens alone: the matcher reads the output tokens it has
// not yet read before each mask, so whatever happens to the sequence
// (preemption, a fork, worker recovery) its state follows its tokens; a
// sequence without a matcher replays its whole output through a new one.
struct ConstraintState {
  std::optional<constraints::Matcher> matcher;
  int tokens_read = 0;   // Output tokens the matcher has read.
  bool refused = false;  // A token the grammar refused: only the end remains.
  // The grammar waits for its SamplingOptions.grammar_after_token: until the
  // output holds it, every token may come (but the draw's bans).
  bool waiting = false;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_CONSTRAINT_STATE_H_
