#include "scheduler/engine/prompt_logprob_store.h"

#include <utility>

namespace pagoda::scheduler {

void PromptLogprobStore::Add(int first_position, std::vector<GeneratedToken> entries) {
  for (int i = 0; i < static_cast<int>(entries.size()); ++i) {
    const int position = first_position + i;
    const int next_missing = num_stored() + 1;
    if (position >= num_prompt_tokens_ || position > next_missing) break;
    if (position == next_missing) entries_.push_back(std::move(entries[i]));
  }
}

std::vector<GeneratedToken> PromptLogprobStore::TakeNew() {
  std::vector<GeneratedToken> fresh(entries_.begin() + num_taken_, entries_.end());
  num_taken_ = entries_.size();
  return fresh;
}

}  // namespace pagoda::scheduler
