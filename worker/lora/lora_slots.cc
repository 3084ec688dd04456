#include "worker/lora/lora_slots.h"

#include "absl/strings/str_cat.h"
#include "worker/lora/lora_kernel.h"

namespace pagoda::worker {

LoraSlots::LoraSlots(int max_loras, int max_rank, int num_layers,
                     const std::array<LinearShape, kNumLoraModules>& shapes)
    : max_loras_(max_loras),
      max_rank_(max_rank),
      num_layers_(num_layers),
      shapes_(shapes),
      slots_(static_cast<size_t>(max_loras) + 1) {}

absl::Status LoraSlots::CheckAdapter(const LoraAdapter& adapter) const {
  if (static_cast<int>(adapter.layers.size()) != num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA adapter has ", adapter.layers.size(),
                                                   " layers, the model ", num_layers_));
  }
  for (const auto& layer : adapter.layers) {
    for (LoraModule module : kAllLoraModules) {
      const auto& pair = layer[static_cast<int>(module)];
      if (!pair) continue;
      const LinearShape expected = shapes_[static_cast<int>(module)];
      if (pair->rank < 1 || pair->rank > max_rank_ || pair->in != expected.in ||
          pair->out != expected.out) {
        return absl::InvalidArgumentError(
            absl::StrCat("LoRA ", LoraModuleName(module), " of rank ", pair->rank, " maps ",
                         pair->in, " to ", pair->out, "; this worker's takes ", expected.in, " to ",
                         expected.out, " with rank at most ", max_rank_));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LoraSlots::Load(int slot, const LoraAdapter& adapter) {
  if (slot < 1 || slot > max_loras_) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA slot ", slot, " is outside [1, ", max_loras_, "]"));
  }
  Unload(slot);
  if (absl::Status status = CheckAdapter(adapter); !status.ok()) return status;
  Slot& target = slots_[slot];
  target.layers.resize(num_layers_);
  for (int layer = 0; layer < num_layers_; ++layer) {
    for (int m = 0; m < kNumLoraModules; ++m) {
      const auto& pair = adapter.layers[layer][m];
      if (!pair) continue;
      Update update{pair->rank, pair->a, std::vector<float>(pair->rank * pair->out)};
      for (int64_t o = 0; o < pair->out; ++o) {
        for (int k = 0; k < pair->rank; ++k) {
          update.b_t[k * pair->out + o] = pair->b[o * pair->rank + k];
        }
      }
      target.layers[layer][m] = std::move(update);
    }
  }
  target.scale = adapter.scale;
  target.loaded = true;
  return absl::OkStatus();
}

void LoraSlots::Unload(int slot) {
  if (slot < 1 || slot > max_loras_) return;
  slots_[slot] = Slot{};
}

absl::Status LoraSlots::Apply(const float* x, int rows, const int32_t* row_slots, LoraTarget target,
                              float* y) const {
  if (target.layer < 0 || target.layer >= num_layers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA layer ", target.layer, " is outside [0, ", num_layers_, ")"));
  }
  // Rows grouped by slot (a counting sort), so each adapter's A and B are
  // read once per group while they stay in cache.
  std::vector<int> counts(slots_.size() + 1, 0);
  for (int r = 0; r < rows; ++r) {
    if (row_slots[r] < 0 || row_slots[r] > max_loras_) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, " names LoRA slot ", row_slots[r],
                                                     ", outside [0, ", max_loras_, "]"));
    }
    ++counts[row_slots[r] + 1];
  }
  for (size_t s = 1; s < counts.size(); ++s) counts[s] += counts[s - 1];
  std::vector<int32_t> grouped(rows);
  std::vector<int> next(counts.begin(), counts.end() - 1);
  for (int r = 0; r < rows; ++r) grouped[next[row_slots[r]]++] = r;

  const LinearShape shape = shapes_[static_cast<int>(target.module)];
  std::vector<float> scratch(max_rank_);
  for (int s = 1; s <= max_loras_; ++s) {
    const int begin = counts[s], end = counts[s + 1];
    const Slot& slot = slots_[s];
    if (begin == end || !slot.loaded) continue;
    const auto& update = slot.layers[target.layer][static_cast<int>(target.module)];
    if (!update) continue;
    const LoraKernelWeights weights{update->a.data(), update->b_t.data(), update->rank,
                                    shape.in,         shape.out,          slot.scale};
    AddLoraUpdate(weights, x, grouped.data() + begin, end - begin, scratch.data(), y);
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
