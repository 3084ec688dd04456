// The worker's adapter slots (--max-loras of them) and LoraSlots::Apply,
// which adds each row's adapter update to a projection's output after the
// base Linear's Forward (docs/extension-points.md). Slot 0 is the base
// model: its rows are left alone.
#ifndef PAGODA_WORKER_LORA_LORA_SLOTS_H_
#define PAGODA_WORKER_LORA_LORA_SLOTS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "common/lora_adapter.h"

namespace pagoda::worker {

// Which projection of which layer an Apply is for.
struct LoraTarget {
  int layer = 0;
  LoraModule module = LoraModule::kQ;
};

class LoraSlots {
 public:
  // `shapes[module]`: this rank's [out, in] of each projection (the shard's,
  // under tensor parallelism), against which loaded adapters are checked.
  LoraSlots(int max_loras, int max_rank, int num_layers,
            const std::array<LinearShape, kNumLoraModules>& shapes);

  int max_loras() const { return max_loras_; }

  // Copies `adapter` (already sharded for this rank) into `slot`
  // (1..max_loras), replacing what was there. INVALID_ARGUMENT for a slot
  // out of range, a rank above max_rank, another layer count, or a
  // projection whose shape is not this rank's. A failed load leaves the
  // slot empty. It may run while Apply serves steps that use other slots
  // (the scheduler never loads into a slot the running step uses): each
  // slot's storage is its own.
  absl::Status Load(int slot, const LoraAdapter& adapter);
  // Empties `slot`: its rows then get no update.
  void Unload(int slot);

  // y[r, :] += scale_s · B_s (A_s x[r, :]) for every row r < rows whose
  // row_slots[r] = s is a loaded slot with an update for `target`; x is
  // [rows, in] and y [rows, out] of the target's shapes, f32. Rows of slot 0,
  // of an empty slot, or of an adapter that leaves `target` alone are not
  // touched. INVALID_ARGUMENT for a row slot outside [0, max_loras] or a
  // layer outside the model.
  absl::Status Apply(const float* x, int rows, const int32_t* row_slots, LoraTarget target,
                     float* y) const;

 private:
  struct Update {
    int rank = 0;
    std::vector<float> a;    // [rank, in]
    std::vector<float> b_t;  // [rank, out]
  };
  struct Slot {
    bool loaded = false;
    float scale = 0;
    std::vector<std::array<std::optional<Update>, kNumLoraModules>> layers;
  };
  absl::Status CheckAdapter(const LoraAdapter& adapter) const;

  int max_loras_;
  int max_rank_;
  int num_layers_;
  std::array<LinearShape, kNumLoraModules> shapes_;
  std::vector<Slot> slots_;  // Index 0 unused (the base model).
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LORA_LORA_SLOTS_H_
