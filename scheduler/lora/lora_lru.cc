#include "scheduler/lora/lora_lru.h"

#include "absl/strings/str_cat.h"

namespace pagoda::lora {

absl::StatusOr<std::vector<int>> LoraLru::Touch(int id, const absl::flat_hash_set<int>& pinned) {
  if (auto it = position_.find(id); it != position_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return std::vector<int>{};
  }
  // Room for one more: the least recently used unpinned ids go.
  const int excess = static_cast<int>(order_.size()) + 1 - capacity_;
  std::vector<int> evicted;
  for (auto it = order_.rbegin(); it != order_.rend() && static_cast<int>(evicted.size()) < excess;
       ++it) {
    if (!pinned.contains(*it)) evicted.push_back(*it);
  }
  if (static_cast<int>(evicted.size()) < excess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", capacity_, " host-cached LoRA adapters (--max-cpu-loras) are in use"));
  }
  for (int victim : evicted) Erase(victim);
  order_.push_front(id);
  position_[id] = order_.begin();
  return evicted;
}

void LoraLru::Erase(int id) {
  auto it = position_.find(id);
  if (it == position_.end()) return;
  order_.erase(it->second);
  position_.erase(it);
}

}  // namespace pagoda::lora
