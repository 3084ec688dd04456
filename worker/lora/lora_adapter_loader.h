// LoraAdapterLoader: what the worker's LoadLoraAdapter and UnloadLoraAdapter
// RPCs do to this rank's adapter slots, given the base model the slots serve:
// check the request, read the PEFT directory (or find it in the host cache,
// --max-cpu-loras), take this rank's tensor-parallel slice and copy it into
// a slot.
#ifndef PAGODA_WORKER_LORA_LORA_ADAPTER_LOADER_H_
#define PAGODA_WORKER_LORA_LORA_ADAPTER_LOADER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/lora_limits.h"
#include "common/model_config.h"
#include "common/tensor_parallel_plan.h"
#include "worker/lora/lora_adapter_cache.h"
#include "worker/lora/lora_slots.h"

namespace pagoda::worker {

// INVALID_ARGUMENT unless max_loras is in [0, kMaxLoraSlots], max_cpu_loras
// in [0, kMaxCpuLoras], max_trainable_tokens in [0, kMaxLoraTrainableTokens]
// and, with max_loras > 0, max_lora_rank in [1, kMaxLoraRank].
absl::Status CheckLoraLimits(int max_loras, int max_lora_rank, int max_cpu_loras = 0,
                             int max_trainable_tokens = 0);

struct LoraLoadResult {
  int rank = 0;
  int64_t bytes = 0;
  double seconds = 0;
  bool cached = false;  // Found in the host cache: no file was read.
};

// Reads the adapter directory at a canonical path and slices it for this
// rank: LoadLoraAdapter then ShardLoraAdapter by default; tests count reads.
using LoraAdapterReader = std::function<absl::StatusOr<LoraAdapter>(const std::string& path)>;

class LoraAdapterLoader {
 public:
  // `base`: the whole model's config (head_dim and num_key_value_heads
  // filled in); `shard`: this rank's part of it; `slots` sized for the
  // shard's projections; `max_cpu_loras`: adapters kept parsed in host
  // memory (0: as many as there are slots); `reader`: null reads the files.
  LoraAdapterLoader(ModelConfig base, TensorParallelShard shard, std::shared_ptr<LoraSlots> slots,
                    int max_cpu_loras = 0, LoraAdapterReader reader = nullptr);

  // Reads the adapter at `path` (an absolute directory path of at most
  // kMaxLoraPathBytes, no NUL) into `slot`, replacing what it held; loads
  // run one at a time, beside the steps. An adapter read before whose files
  // are unchanged (canonical path, device, inode, size, mtime) comes from the
  // host cache without reading them. INVALID_ARGUMENT for a bad slot or
  // path and whatever LoadLoraAdapter, ShardLoraAdapter and LoraSlots::Load
  // refuse (one line naming the file); NOT_FOUND for a missing directory
  // or file. A failed load leaves the slot empty.
  absl::StatusOr<LoraLoadResult> Load(int slot, const std::string& path);
  // Empties `slot`; INVALID_ARGUMENT outside [1, max_loras].
  absl::Status Unload(int slot);

  const std::shared_ptr<LoraSlots>& slots() const { return slots_; }
  // Adapters in the host cache now, and its capacity.
  int cached_adapters() ABSL_LOCKS_EXCLUDED(load_mutex_);
  int cache_capacity() const { return cache_capacity_; }

 private:
  absl::Status CheckSlot(int slot) const;
  // The adapter at `canonical` from the cache, or read (and cached).
  absl::StatusOr<std::shared_ptr<const LoraAdapter>> CachedOrRead(const std::string& canonical,
                                                                  bool* cached)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(load_mutex_);

  const ModelConfig base_;
  const TensorParallelShard shard_;
  const std::shared_ptr<LoraSlots> slots_;
  const int cache_capacity_;
  const LoraAdapterReader reader_;
  // One load at a time: bounds the host memory of adapters being read.
  absl::Mutex load_mutex_;
  LoraAdapterCache cache_ ABSL_GUARDED_BY(load_mutex_);
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LORA_LORA_ADAPTER_LOADER_H_
