// CudaLoraSlots: the CUDA backend's LoraDeviceSlots. Every slot's A and Bᵀ
// (max rank, every projection of every layer) are allocated on the device
// when the model loads, before the memory profile, so the KV cache is sized
// with them in place and a load allocates nothing; a load converts the
// adapter to the activation dtype and copies it into its slot on a stream
// of its own; a step applies them with the batched shrink/expand kernels
// (kernels/ops/lora.h) on the backend's stream. LoRA steps run eagerly (no
// CUDA graph): the adapters' pointers, ranks and scales are kernel
// arguments chosen per step.
#ifndef PAGODA_WORKER_CUDA_CUDA_LORA_SLOTS_H_
#define PAGODA_WORKER_CUDA_CUDA_LORA_SLOTS_H_

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/lora/lora_slots.h"

namespace pagoda::worker {

class CudaLoraSlots final : public LoraDeviceSlots {
 public:
  // Allocates `slots`' device memory and the step scratch for `max_tokens`
  // tokens (grown if a step has more). RESOURCE_EXHAUSTED when the device
  // cannot hold them. `backend` must outlive this.
  static absl::StatusOr<std::shared_ptr<CudaLoraSlots>> Create(CudaBackend* backend,
                                                               const LoraSlots& slots,
                                                               int max_tokens);
  ~CudaLoraSlots() override;

  absl::Status Upload(int slot, const LoraAdapter& adapter) override;
  absl::Status BeginStep(const LoraSlots::View& view, const int32_t* row_slots,
                         int num_tokens) override;
  absl::Status Apply(LoraTarget target, const void* x, void* y, int64_t y_stride) override;

  // Device bytes of every slot's matrices.
  size_t slot_bytes() const { return slot_bytes_ * static_cast<size_t>(max_loras_); }

 private:
  CudaLoraSlots(CudaBackend* backend, const LoraSlots& slots);
  // Where slot s's A and Bᵀ of (layer, module) start in its buffer.
  size_t AOffset(int layer, int module) const;
  size_t BOffset(int layer, int module) const;
  void* SlotBase(int slot) const;
  absl::Status GrowStepBuffers(int num_tokens);

  CudaBackend* const backend_;
  const DType dtype_;
  const int max_loras_;
  const int max_rank_;
  const int num_layers_;
  std::array<LinearShape, kNumLoraModules> shapes_;
  size_t layer_elements_ = 0;  // Elements of one layer's A and Bᵀ, every module.
  size_t slot_bytes_ = 0;
  cudaStream_t upload_stream_ = nullptr;
  std::unique_ptr<Buffer> weights_;  // max_loras slots of slot_bytes_.
  // Step state (the step's thread only).
  std::unique_ptr<Buffer> row_groups_;  // int32 [capacity]
  std::unique_ptr<Buffer> scratch_;     // f32 [capacity, max_rank]
  int step_capacity_ = 0;
  const LoraSlots::View* view_ = nullptr;
  int num_tokens_ = 0;
  std::vector<int> group_slots_;      // The step's slots in group order.
  std::vector<int32_t> host_groups_;  // Each token's group, -1: none.
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_LORA_SLOTS_H_
