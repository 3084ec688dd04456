#ifndef PAGODA_SCHEDULER_KV_KV_SEQUENCE_H_
#define PAGODA_SCHEDULER_KV_KV_SEQUENCE_H_

// KvSequence and KvSequenceGroup: the interfaces through which the block
// manager reads the engine's sequences, so kv/ depends on nothing of the
// engine.

#include <cstdint>

#include "absl/container/inlined_vector.h"

namespace pagoda::scheduler {

// What the block manager reads of a sequence: its id, its tokens, and how
// many of them already have their K/V in the cache. The engine's Sequence
// implements it, so kv/ knows nothing of requests, sampling or statuses and
// the arrow between the two rooms points one way (engine -> kv).
class KvSequence {
 public:
  virtual int64_t seq_id() const = 0;
  // Prompt plus generated tokens.
  virtual int length() const = 0;
  // Token at position i of prompt + output. REQUIRES: 0 <= i < length().
  virtual int32_t token_at(int i) const = 0;
  virtual int num_computed_tokens() const = 0;
  // Slots past length() a decode step reserves for speculative tokens (0 =
  // plain decoding): AppendSlots extends the table over them too.
  virtual int num_lookahead_slots() const { return 0; }
  // The LoRA adapter whose K/V the sequence computes (vLLM's lora_int_id,
  // scheduler/lora/LoraRegistry's id); 0: the base model. Its blocks are
  // hashed apart from every other adapter's and the base model's.
  virtual int lora_id() const { return 0; }

 protected:
  ~KvSequence() = default;
};

// The sequences of one request that a block-manager operation applies to,
// by the phase they are in: waiting for their first blocks (CanAllocate,
// Allocate), running on the GPU (CanAppendSlots, CanSwapOut, SwapOut) or
// swapped out to the CPU (CanSwapIn, SwapIn). The engine's SequenceGroup
// implements it; the pointers stay valid while the group is not changed.
enum class KvPhase { kWaiting, kRunning, kSwapped };

class KvSequenceGroup {
 public:
  // Most groups hold one sequence, and the block manager asks every running
  // group at every step (BlocksToAppendSlots): the list is inline for one.
  virtual absl::InlinedVector<const KvSequence*, 1> SequencesIn(KvPhase phase) const = 0;
  // Whether Allocate must give the group fresh blocks only, reusing no
  // prefix-cached block (it computes its whole prompt: prompt logprobs need
  // every row). Its computed blocks are still published to the cache.
  virtual bool SkipsPrefixCache() const { return false; }

 protected:
  ~KvSequenceGroup() = default;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_KV_KV_SEQUENCE_H_
