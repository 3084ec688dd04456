#ifndef PAGODA_SCHEDULER_ENGINE_GROUP_COUNTS_H_
#define PAGODA_SCHEDULER_ENGINE_GROUP_COUNTS_H_

#include <algorithm>

#include "scheduler/engine/sequence.h"

// Token and seat counts of a group that the scheduler's policies share
// (scheduler.cc, scheduler_chunked.cc, scheduler_priority.cc).
namespace pagoda::scheduler::group_counts {

// Tokens a group's sequences in `status` still have to compute.
inline int NumNewTokens(const SequenceGroup& group, SequenceStatus status) {
  int tokens = 0;
  for (const Sequence* seq : group.SeqsWithStatus(status)) {
    tokens += seq->length() - seq->num_computed_tokens();
  }
  return tokens;
}

inline int NumSeqs(const SequenceGroup& group, SequenceStatus status) {
  return static_cast<int>(group.SeqsWithStatus(status).size());
}

// Batch seats the group's waiting sequences take once running: a group that
// forks into best_of samples or beams after its prompt books them all.
inline int SeatsOnceRunning(const SequenceGroup& group) {
  return std::max(NumSeqs(group, SequenceStatus::kWaiting),
                  group.seqs().size() == 1 ? group.sampling().best_of : 1);
}

// The longest of the group's waiting sequences.
inline int LongestWaiting(const SequenceGroup& group) {
  int longest = 0;
  for (const Sequence* seq : group.SeqsWithStatus(SequenceStatus::kWaiting)) {
    longest = std::max(longest, seq->length());
  }
  return longest;
}

}  // namespace pagoda::scheduler::group_counts

#endif  // PAGODA_SCHEDULER_ENGINE_GROUP_COUNTS_H_
