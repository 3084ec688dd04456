// The adapters the server serves, by name: --lora-modules at start and
// /v1/load_lora_adapter at run time add them, /v1/unload_lora_adapter
// removes them. Each gets an id (vLLM's lora_int_id, the lora_id of KV
// events), never reused, and a count of the requests that use it.
//
// Unloading an adapter that requests use (queued or running) is refused
// with FAILED_PRECONDITION naming the count, not deferred: the caller
// retries once they finish, and no request ever loses its adapter midway.
#ifndef PAGODA_SCHEDULER_LORA_LORA_REGISTRY_H_
#define PAGODA_SCHEDULER_LORA_LORA_REGISTRY_H_

#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/lora/lora_options.h"

namespace pagoda::lora {

inline constexpr int kMaxRegisteredLoras = 4096;

struct LoraEntry {
  int id = 0;
  LoraModuleSpec spec;
  int requests = 0;  // Requests holding it (Acquire without Release).
};

// Thread-safe.
class LoraRegistry {
 public:
  // Registers `spec` (its path already resolved and the adapter validated
  // by the caller). ALREADY_EXISTS for a name already served,
  // INVALID_ARGUMENT for a bad name, RESOURCE_EXHAUSTED past 4096 adapters.
  absl::StatusOr<int> Add(LoraModuleSpec spec);
  // NOT_FOUND for an unknown name; FAILED_PRECONDITION while requests use
  // it. On success returns the removed adapter's id (its slot and host copy
  // are then the caller's to free).
  absl::StatusOr<int> Remove(absl::string_view name);
  // A request for `name` starts: NOT_FOUND for an unknown (or unloaded) name.
  absl::StatusOr<int> Acquire(absl::string_view name);
  // That request ended (finished, aborted or failed).
  void Release(int id);
  absl::StatusOr<LoraEntry> Find(absl::string_view name) const;
  // The adapter with `id` (the engine loads its path into a worker slot);
  // NOT_FOUND once removed.
  absl::StatusOr<LoraEntry> FindById(int id) const;
  // Every adapter, in the order they were added (/v1/models).
  std::vector<LoraEntry> List() const;

 private:
  mutable absl::Mutex mutex_;
  int next_id_ ABSL_GUARDED_BY(mutex_) = 1;
  std::map<std::string, LoraEntry, std::less<>> by_name_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace pagoda::lora

#endif  // PAGODA_SCHEDULER_LORA_LORA_REGISTRY_H_
