// LoraAdapterLoader: what the worker's LoadLoraAdapter and UnloadLoraAdapter
// RPCs do to this rank's adapter slots, given the base model the slots serve:
// check the request, read the PEFT directory, take this rank's tensor-parallel
// slice and copy it into a slot.
#ifndef PAGODA_WORKER_LORA_LORA_ADAPTER_LOADER_H_
#define PAGODA_WORKER_LORA_LORA_ADAPTER_LOADER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/lora_limits.h"
#include "common/model_config.h"
#include "common/tensor_parallel_plan.h"
#include "worker/lora/lora_slots.h"

namespace pagoda::worker {

// INVALID_ARGUMENT unless max_loras is in [0, kMaxLoraSlots] and, with
// max_loras > 0, max_lora_rank in [1, kMaxLoraRank].
absl::Status CheckLoraLimits(int max_loras, int max_lora_rank);

struct LoraLoadResult {
  int rank = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

class LoraAdapterLoader {
 public:
  // `base`: the whole model's config (head_dim and num_key_value_heads
  // filled in); `shard`: this rank's part of it; `slots` sized for the
  // shard's projections.
  LoraAdapterLoader(ModelConfig base, TensorParallelShard shard, std::shared_ptr<LoraSlots> slots)
      : base_(std::move(base)), shard_(std::move(shard)), slots_(std::move(slots)) {}

  // Reads the adapter at `path` (an absolute directory path of at most
  // kMaxLoraPathBytes, no NUL) into `slot`, replacing what it held; loads
  // run one at a time, beside the steps. INVALID_ARGUMENT for a bad slot or
  // path and whatever LoadLoraAdapter, ShardLoraAdapter and LoraSlots::Load
  // refuse (one line naming the file); NOT_FOUND for a missing directory
  // or file. A failed load leaves the slot empty.
  absl::StatusOr<LoraLoadResult> Load(int slot, const std::string& path);
  // Empties `slot`; INVALID_ARGUMENT outside [1, max_loras].
  absl::Status Unload(int slot);

  const std::shared_ptr<LoraSlots>& slots() const { return slots_; }

 private:
  absl::Status CheckSlot(int slot) const;

  const ModelConfig base_;
  const TensorParallelShard shard_;
  const std::shared_ptr<LoraSlots> slots_;
  // One load at a time: bounds the host memory of adapters being read.
  absl::Mutex load_mutex_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LORA_LORA_ADAPTER_LOADER_H_
