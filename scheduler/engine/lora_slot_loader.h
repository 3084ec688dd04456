// LoraSlotLoader: the thread that loads LoRA adapters into the workers'
// slots and empties them (WorkerGroup::LoadLoraAdapter / UnloadLoraAdapter
// on every rank), so that the engine thread goes on running steps while an
// adapter is read (docs/lora.md). Work runs in the order it was asked for;
// each load's outcome comes back tagged with the generation the engine gave
// it, so an answer the engine no longer waits for is recognised.
#ifndef PAGODA_SCHEDULER_ENGINE_LORA_SLOT_LOADER_H_
#define PAGODA_SCHEDULER_ENGINE_LORA_SLOT_LOADER_H_

#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/workers/worker_group.h"

namespace pagoda::scheduler {

class LoraSlotLoader {
 public:
  struct Done {
    int slot = 0;
    int64_t generation = 0;
    absl::Status status;  // OK once every rank loaded it.
  };

  // `workers` must outlive the loader.
  explicit LoraSlotLoader(WorkerGroup* workers);
  ~LoraSlotLoader();  // Drops what is queued and joins.
  LoraSlotLoader(const LoraSlotLoader&) = delete;
  LoraSlotLoader& operator=(const LoraSlotLoader&) = delete;

  void Load(int slot, int64_t generation, std::string path);
  void Unload(int slot);
  // The loads answered since the last call, in order.
  std::vector<Done> TakeDone();
  // Drops the queued work and waits for the call in progress: before
  // WorkerGroup::Recover or Shutdown, which no load may run beside.
  void Quiesce();
  // Whether work is queued or running (tests wait on it).
  bool Busy() const;

 private:
  struct Task {
    int slot = 0;
    int64_t generation = 0;
    std::string path;  // Empty: unload.
  };
  void Run();
  absl::Status Execute(const Task& task);

  WorkerGroup* const workers_;
  mutable absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<Done> done_ ABSL_GUARDED_BY(mu_);
  bool running_task_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_ENGINE_LORA_SLOT_LOADER_H_
