// A least-recently-used set of adapter ids with a capacity: the
// --max-cpu-loras adapters whose weights the workers keep in host memory,
// so that moving one into a slot needs no disk read.
#ifndef PAGODA_SCHEDULER_LORA_LORA_LRU_H_
#define PAGODA_SCHEDULER_LORA_LORA_LRU_H_

#include <list>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"

namespace pagoda::lora {

class LoraLru {
 public:
  explicit LoraLru(int capacity) : capacity_(capacity) {}

  // Makes `id` the most recently used, inserting it. Returns the ids evicted
  // to stay within capacity, least recently used first, never one of
  // `pinned` (the adapters in worker slots). RESOURCE_EXHAUSTED, changing
  // nothing, when only pinned ids could make room.
  absl::StatusOr<std::vector<int>> Touch(int id, const absl::flat_hash_set<int>& pinned);
  void Erase(int id);
  bool Contains(int id) const { return position_.contains(id); }
  // Most recently used first.
  std::vector<int> Order() const { return {order_.begin(), order_.end()}; }

 private:
  int capacity_;
  std::list<int> order_;  // Most recently used at the front.
  absl::flat_hash_map<int, std::list<int>::iterator> position_;
};

}  // namespace pagoda::lora

#endif  // PAGODA_SCHEDULER_LORA_LORA_LRU_H_
