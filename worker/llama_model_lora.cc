// LlamaModel's LoRA: the adapter slots for this rank's projection shapes and
// the pinned adapters' updates added after each target projection
// (docs/lora.md). The forward pass that calls them is llama_model.cc's.

#include <array>

#include "common/lora_shard.h"
#include "worker/llama_model.h"

namespace pagoda::worker {

absl::Status LlamaModel::EnableLora(const LlamaLoadOptions& options, const ModelConfig& full_config,
                                    const TensorParallelShard& shard) {
  // This rank's part of each projection: the split dimension is the shard's.
  std::array<LinearShape, kNumLoraModules> shapes;
  for (LoraModule module : kAllLoraModules) {
    LinearShape shape = LoraModuleShape(full_config, module);
    const int64_t part = LoraShardRange(full_config, shard, module).size();
    (IsRowParallel(module) ? shape.in : shape.out) = part;
    shapes[static_cast<int>(module)] = shape;
  }
  auto slots = std::make_shared<LoraSlots>(options.max_loras, options.max_lora_rank,
                                           full_config.num_hidden_layers, shapes);
  slots->SetVocabulary(full_config.vocab_size, full_config.hidden_size,
                       options.max_lora_trainable_tokens);
  if (options.lora_device) {
    auto device = options.lora_device(*slots, std::max(1, options.max_num_batched_tokens));
    if (!device.ok()) return device.status();
    lora_device_ = device->get();
    slots->AttachDevice(*std::move(device));
  }
  lora_loader_ = std::make_shared<LoraAdapterLoader>(full_config, shard, std::move(slots),
                                                     options.max_cpu_loras);
  return absl::OkStatus();
}

const LoraSlots::View* LlamaModel::PinLoraSlots() {
  if (lora_loader_ == nullptr) return nullptr;
  lora_view_ = lora_loader_->slots()->Snapshot();
  return &lora_view_;
}

absl::Status LlamaModel::ApplyLora(int layer, LoraModule module, const void* x, int tokens, void* y,
                                   int64_t y_stride) const {
  if (step_lora_slots_ == nullptr) return absl::OkStatus();
  if (lora_device_ != nullptr) return lora_device_->Apply({layer, module}, x, y, y_stride);
  const LoraParallelFor on_pool = [this](int64_t n, int64_t grain, const auto& fn) {
    backend_->HostParallelFor(n, grain, fn);
  };
  return lora_view_.Apply(static_cast<const float*>(x), tokens, step_lora_slots_, {layer, module},
                          static_cast<float*>(y), y_stride, &on_pool);
}

absl::Status LlamaModel::ApplyLoraEmbedding(const FlatBatch& batch, void* residual) const {
  if (step_lora_slots_ == nullptr || lora_device_ != nullptr) return absl::OkStatus();
  return lora_view_.ApplyEmbedding(batch.input_ids.data(), static_cast<int>(batch.input_ids.size()),
                                   step_lora_slots_, static_cast<float*>(residual));
}

void LlamaModel::TakeLogitsLoraSlots(const FlatBatch& batch) {
  logits_lora_slots_.clear();
  if (step_lora_slots_ == nullptr) return;
  for (int32_t row : batch.logits_indices) logits_lora_slots_.push_back(batch.lora_slots[row]);
}

}  // namespace pagoda::worker
