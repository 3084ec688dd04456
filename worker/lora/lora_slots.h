// The worker's adapter slots (--max-loras of them) and LoraSlots::Apply,
// which adds each row's adapter update to a projection's output after the
// base Linear's Forward (docs/extension-points.md). Slot 0 is the base
// model: its rows are left alone. And LoraDeviceSlots, where a backend
// whose activations live on a device (CUDA) keeps and applies the slots'
// matrices instead (docs/lora.md, "On CUDA").
#ifndef PAGODA_WORKER_LORA_LORA_SLOTS_H_
#define PAGODA_WORKER_LORA_LORA_SLOTS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/lora_adapter.h"

namespace pagoda::worker {

class LoraDeviceSlots;
struct SimdKernels;

// Which projection of which layer an Apply is for.
struct LoraTarget {
  int layer = 0;
  LoraModule module = LoraModule::kQ;
};

// Runs fn(begin, end) over disjoint ranges covering [0, n), each at least
// `grain` long but the last (the CPU backend's thread pool); null: inline.
using LoraParallelFor =
    std::function<void(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn)>;

class LoraSlots {
 public:
  // Trainable tokens' replacement rows, sorted by token id (a row's lookup
  // is a binary search).
  struct TokenRows {
    std::vector<int32_t> ids;
    std::vector<float> rows;  // [ids.size(), hidden].
  };

 private:
  struct Update {
    int rank = 0;
    // A and Bᵀ in the CPU kernel's layouts (LoraKernelWeights); empty when
    // the slots live on a device.
    std::vector<float> a_panels;
    std::vector<float> b_t;
  };
  // embed_tokens' update: token t's row gains scale · B a_t[t] (a_t is Aᵀ,
  // [vocab, rank], so a token's column of A is one contiguous row).
  struct EmbedUpdate {
    int rank = 0;
    std::vector<float> a_t;
    std::vector<float> b;  // [hidden, rank].
  };
  struct Slot {
    float scale = 0;
    std::vector<std::array<std::optional<Update>, kNumLoraModules>> layers;
    std::optional<EmbedUpdate> embed_tokens;
    std::optional<Update> lm_head;  // A [rank, hidden] to [vocab].
    std::optional<TokenRows> embed_rows;
    std::optional<TokenRows> head_rows;
  };

 public:
  // `shapes[module]`: this rank's [out, in] of each projection (the shard's,
  // under tensor parallelism), against which loaded adapters are checked.
  // View::Apply runs on the CPU kernels of the best SIMD level this CPU
  // runs, or on `simd` (tests pick each level).
  LoraSlots(int max_loras, int max_rank, int num_layers,
            const std::array<LinearShape, kNumLoraModules>& shapes);
  LoraSlots(int max_loras, int max_rank, int num_layers,
            const std::array<LinearShape, kNumLoraModules>& shapes, const SimdKernels& simd);

  // Keeps the slots' matrices in `device` from now on (call before any
  // Load): Load hands them to it and keeps only ranks and scales here, and
  // View::Apply refuses (the model applies through the device instead).
  void AttachDevice(std::shared_ptr<LoraDeviceSlots> device) { device_ = std::move(device); }
  // Lets adapters carry embed_tokens and lm_head updates for a model of
  // `vocab` tokens and `hidden` features, and trainable tokens, at most
  // `max_trainable_tokens` per module (call before any Load; the CPU only:
  // with a device attached such adapters are refused). Without it they are
  // refused.
  void SetVocabulary(int64_t vocab, int64_t hidden, int max_trainable_tokens = 0) {
    vocabulary_ = {vocab, hidden};
    max_trainable_tokens_ = max_trainable_tokens;
  }
  int max_trainable_tokens() const { return max_trainable_tokens_; }
  const std::shared_ptr<LoraDeviceSlots>& device() const { return device_; }

  int max_loras() const { return max_loras_; }
  int max_rank() const { return max_rank_; }
  int num_layers() const { return num_layers_; }
  // This rank's [out, in] of `module`.
  LinearShape shape(LoraModule module) const { return shapes_[static_cast<int>(module)]; }
  // f32 bytes of A and B of the largest adapter a slot takes (max_rank on
  // every projection of every layer): what bounds one host cache entry.
  size_t MaxAdapterBytes() const;

  // The slots as they are now, for one step: a load or unload after it does
  // not change what the view applies, and the view keeps what it holds
  // alive, so a load may replace a slot while a step runs without a race.
  class View {
   public:
    View() = default;
    // Whether `slot` (0..max_loras) holds an adapter; slot 0 never does.
    bool loaded(int slot) const {
      return slot > 0 && slot < static_cast<int>(slots_.size()) && slots_[slot] != nullptr;
    }
    int max_loras() const { return static_cast<int>(slots_.size()) - 1; }
    // The rank of `slot`'s update of `target` (0: none, or no adapter), and
    // its scale (0 when empty).
    int rank(int slot, LoraTarget target) const;
    float scale(int slot) const { return loaded(slot) ? slots_[slot]->scale : 0.0f; }

    // y[r * y_stride + o] += scale_s · (B_s (A_s x[r, :]))[o] for every
    // row r < rows whose row_slots[r] = s is a loaded slot with an update
    // for `target`; x is [rows, in] and y rows of at least `out` (the
    // target's shapes; y_stride 0 means `out`), f32. Rows of slot 0, of an
    // empty slot, or of an adapter that leaves `target` alone are not
    // touched. Each slot's rows run together through the CPU kernel
    // (lora_kernel.h) in tasks of at most kLoraRowsPerCall rows, spread over
    // `parallel_for` when given.
    // INVALID_ARGUMENT for a row slot outside [0, max_loras] or a layer
    // outside the model.
    absl::Status Apply(const float* x, int rows, const int32_t* row_slots, LoraTarget target,
                       float* y, int64_t y_stride = 0,
                       const LoraParallelFor* parallel_for = nullptr) const;

    // embed_tokens: y[r, :] += scale_s · B_s A_s[:, token_ids[r]] for the
    // rows whose slot's adapter updates the embedding, then y[r, :] = the
    // slot's trainable-token row where it has one for token_ids[r] (vLLM's
    // order); y is [rows, hidden] f32. INVALID_ARGUMENT for a row slot
    // outside [0, max_loras] or a token id outside the vocabulary.
    absl::Status ApplyEmbedding(const int32_t* token_ids, int rows, const int32_t* row_slots,
                                float* y) const;
    // lm_head: as Apply, for the head ([vocab, hidden]), then
    // logits[r, t] = x[r, :] · row_t for each trainable token t of the
    // row's slot; logits rows are `logits_stride` apart (0: vocab).
    absl::Status ApplyLmHead(const float* x, int rows, const int32_t* row_slots, float* logits,
                             int64_t logits_stride = 0,
                             const LoraParallelFor* parallel_for = nullptr) const;

   private:
    friend class LoraSlots;
    // Apply's body for the update `update_of(slot)` (null: none) of shape
    // `shape`; update_of is asked once per slot.
    absl::Status ApplyGrouped(absl::FunctionRef<const Update*(int)> update_of, LinearShape shape,
                              const float* x, int rows, const int32_t* row_slots, float* y,
                              int64_t y_stride, const LoraParallelFor* parallel_for) const;
    absl::Status CheckRowSlots(const int32_t* row_slots, int rows) const;
    // ApplyLmHead's second half: each row's trainable tokens' logits.
    void ReplaceTokenLogits(const float* x, int rows, const int32_t* row_slots, float* logits,
                            int64_t logits_stride) const;
    const LoraSlots* owner_ = nullptr;
    std::vector<std::shared_ptr<const Slot>> slots_;  // Index 0 null (the base model).
  };
  View Snapshot() const;

  // Copies `adapter` (already sharded for this rank) into `slot`
  // (1..max_loras), replacing what was there. INVALID_ARGUMENT for a slot
  // out of range, a rank above max_rank, another layer count, or a
  // projection whose shape is not this rank's. A failed load leaves the
  // slot empty. Thread-safe, and safe beside steps: the copy is made
  // aside and swapped in (views taken before keep the old contents).
  absl::Status Load(int slot, const LoraAdapter& adapter);
  // Empties `slot`: its rows then get no update. Thread-safe.
  void Unload(int slot);

  // Snapshot().Apply(...), for callers that hold no view.
  absl::Status Apply(const float* x, int rows, const int32_t* row_slots, LoraTarget target,
                     float* y) const {
    return Snapshot().Apply(x, rows, row_slots, target, y);
  }

 private:
  absl::Status CheckAdapter(const LoraAdapter& adapter) const;
  absl::Status CheckVocabularyUpdates(const LoraAdapter& adapter) const;
  absl::Status CheckTokenRows(const LoraAdapter& adapter) const;

  const SimdKernels* const simd_;
  const int max_loras_;
  const int max_rank_;
  const int num_layers_;
  const std::array<LinearShape, kNumLoraModules> shapes_;
  LinearShape vocabulary_;  // lm_head's [vocab, hidden]; 0 until SetVocabulary.
  int max_trainable_tokens_ = 0;
  std::shared_ptr<LoraDeviceSlots> device_;
  mutable absl::Mutex mutex_;
  std::vector<std::shared_ptr<const Slot>> slots_ ABSL_GUARDED_BY(mutex_);
};

// Where a backend whose activations live on a device keeps the slots' A and
// B and applies them: LoraSlots keeps the slots' host-side record (ranks,
// scales; what a step pins) and hands each load's matrices to it, and the
// model calls BeginStep and Apply instead of LoraSlots::View::Apply.
class LoraDeviceSlots {
 public:
  virtual ~LoraDeviceSlots() = default;

  // Copies `adapter` (checked by LoraSlots: this rank's shapes, rank at
  // most max_rank) into `slot`'s device memory and waits for the copy.
  // Called with the slot already marked empty; the server never loads into
  // a slot the step in flight uses (docs/lora.md), so the copy may overwrite
  // it in place. Thread-safe against steps (its own stream).
  virtual absl::Status Upload(int slot, const LoraAdapter& adapter) = 0;

  // Before a step's first Apply: each token's slot (host, num_tokens of
  // them) and the slots the step pinned, whose ranks and scales Apply
  // uses; `view` must outlive the step's Applies (the model keeps it).
  // INVALID_ARGUMENT for a row slot outside [0, max_loras].
  virtual absl::Status BeginStep(const LoraSlots::View& view, const int32_t* row_slots,
                                 int num_tokens) = 0;

  // y[t] += scale · B_s (A_s x[t]) for the step's tokens whose slot holds an
  // update of `target`, on the backend's stream; x [tokens, in] and y rows
  // y_stride elements apart (0: out), in the activation dtype.
  virtual absl::Status Apply(LoraTarget target, const void* x, void* y, int64_t y_stride) = 0;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LORA_LORA_SLOTS_H_
