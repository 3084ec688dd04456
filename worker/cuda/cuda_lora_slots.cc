#include "worker/cuda/cuda_lora_slots.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "kernels/ops/lora.h"

namespace pagoda::worker {
namespace {

absl::Status CudaLoraError(cudaError_t error, const char* what) {
  return absl::InternalError(absl::StrCat("CUDA LoRA ", what, ": ", cudaGetErrorString(error)));
}

// `values` in `dtype` (bf16 or f16: the activation dtypes; f32 as is),
// appended to `out` as raw bytes.
void AppendLoraConverted(const float* values, size_t count, DType dtype,
                         std::vector<uint8_t>* out) {
  const size_t at = out->size();
  out->resize(at + count * DTypeSize(dtype));
  uint8_t* dst = out->data() + at;
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(dst + 4 * i, &values[i], 4);
      continue;
    }
    const uint16_t bits =
        dtype == DType::kBF16 ? FloatToBFloat16(values[i]) : FloatToHalf(values[i]);
    std::memcpy(dst + 2 * i, &bits, 2);
  }
}

}  // namespace

CudaLoraSlots::CudaLoraSlots(CudaBackend* backend, const LoraSlots& slots)
    : backend_(backend),
      dtype_(backend->activation_dtype()),
      max_loras_(slots.max_loras()),
      max_rank_(slots.max_rank()),
      num_layers_(slots.num_layers()) {
  for (LoraModule module : kAllLoraModules) {
    shapes_[static_cast<int>(module)] = slots.shape(module);
    const LinearShape shape = slots.shape(module);
    layer_elements_ += static_cast<size_t>(max_rank_) * (shape.in + shape.out);
  }
  slot_bytes_ = layer_elements_ * num_layers_ * DTypeSize(dtype_);
}

CudaLoraSlots::~CudaLoraSlots() {
  if (upload_stream_ != nullptr) {
    cudaSetDevice(backend_->device());
    cudaStreamDestroy(upload_stream_);
  }
}

absl::StatusOr<std::shared_ptr<CudaLoraSlots>> CudaLoraSlots::Create(CudaBackend* backend,
                                                                     const LoraSlots& slots,
                                                                     int max_tokens) {
  if (slots.max_rank() > kernels::kLoraMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_lora_rank ", slots.max_rank(), " is above the CUDA kernels' ", kernels::kLoraMaxRank));
  }
  std::shared_ptr<CudaLoraSlots> device(new CudaLoraSlots(backend, slots));
  backend->MakeCurrent();
  if (cudaError_t e = cudaStreamCreateWithFlags(&device->upload_stream_, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return CudaLoraError(e, "stream");
  }
  // Buffers are typed; f32 elements hold the raw bytes (and int32 below).
  device->weights_ = backend->Allocate(DType::kF32, (device->slot_bytes() + 3) / 4);
  if (!backend->status().ok() || device->weights_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("LoRA slots need ", device->slot_bytes() >> 20,
                     " MiB of device memory (max_loras ", slots.max_loras(), ", max_lora_rank ",
                     slots.max_rank(), "): ", backend->status().message()));
  }
  if (absl::Status grown = device->GrowStepBuffers(max_tokens); !grown.ok()) return grown;
  return device;
}

absl::Status CudaLoraSlots::GrowStepBuffers(int num_tokens) {
  if (num_tokens <= step_capacity_) return absl::OkStatus();
  row_groups_ = backend_->Allocate(DType::kF32, num_tokens);  // int32 each
  scratch_ = backend_->Allocate(DType::kF32, static_cast<size_t>(num_tokens) * max_rank_);
  if (!backend_->status().ok()) return backend_->status();
  step_capacity_ = num_tokens;
  return absl::OkStatus();
}

size_t CudaLoraSlots::AOffset(int layer, int module) const {
  size_t elements = layer_elements_ * layer;
  for (int m = 0; m < module; ++m) {
    elements += static_cast<size_t>(max_rank_) * (shapes_[m].in + shapes_[m].out);
  }
  return elements * DTypeSize(dtype_);
}

size_t CudaLoraSlots::BOffset(int layer, int module) const {
  return AOffset(layer, module) +
         static_cast<size_t>(max_rank_) * shapes_[module].in * DTypeSize(dtype_);
}

void* CudaLoraSlots::SlotBase(int slot) const {
  return static_cast<uint8_t*>(weights_->raw()) + static_cast<size_t>(slot - 1) * slot_bytes_;
}

absl::Status CudaLoraSlots::Upload(int slot, const LoraAdapter& adapter) {
  if (slot < 1 || slot > max_loras_) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA slot ", slot, " is outside [1, ", max_loras_, "]"));
  }
  // Called from a gRPC thread (the device is per thread), beside steps:
  // nothing of the backend's own state is touched here.
  if (cudaError_t e = cudaSetDevice(backend_->device()); e != cudaSuccess) {
    return CudaLoraError(e, "cudaSetDevice");
  }
  std::vector<uint8_t> staging;  // One projection's A and Bᵀ at a time.
  std::vector<float> b_t;
  for (int layer = 0; layer < num_layers_; ++layer) {
    for (int m = 0; m < kNumLoraModules; ++m) {
      const auto& pair = adapter.layers[layer][m];
      if (!pair) continue;
      staging.clear();
      AppendLoraConverted(pair->a.data(), pair->a.size(), dtype_, &staging);
      b_t.assign(static_cast<size_t>(pair->rank) * pair->out, 0.0f);
      for (int64_t o = 0; o < pair->out; ++o) {
        for (int k = 0; k < pair->rank; ++k) b_t[k * pair->out + o] = pair->b[o * pair->rank + k];
      }
      const size_t a_bytes = staging.size();
      AppendLoraConverted(b_t.data(), b_t.size(), dtype_, &staging);
      uint8_t* base = static_cast<uint8_t*>(SlotBase(slot));
      cudaError_t e = cudaMemcpyAsync(base + AOffset(layer, m), staging.data(), a_bytes,
                                      cudaMemcpyHostToDevice, upload_stream_);
      if (e == cudaSuccess) {
        e = cudaMemcpyAsync(base + BOffset(layer, m), staging.data() + a_bytes,
                            staging.size() - a_bytes, cudaMemcpyHostToDevice, upload_stream_);
      }
      // The staging buffer is reused: wait before refilling it.
      if (e == cudaSuccess) e = cudaStreamSynchronize(upload_stream_);
      if (e != cudaSuccess) return CudaLoraError(e, "upload");
    }
  }
  return absl::OkStatus();
}

absl::Status CudaLoraSlots::BeginStep(const LoraSlots::View& view, const int32_t* row_slots,
                                      int num_tokens) {
  view_ = &view;
  num_tokens_ = num_tokens;
  group_slots_.clear();
  host_groups_.assign(num_tokens, -1);
  std::vector<int> group_of_slot(max_loras_ + 1, -1);
  for (int t = 0; t < num_tokens; ++t) {
    const int slot = row_slots[t];
    if (slot < 0 || slot > max_loras_) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", t, " names LoRA slot ", slot, ", outside [0, ", max_loras_, "]"));
    }
    if (!view.loaded(slot)) continue;
    if (group_of_slot[slot] < 0) {
      group_of_slot[slot] = static_cast<int>(group_slots_.size());
      group_slots_.push_back(slot);
    }
    host_groups_[t] = group_of_slot[slot];
  }
  if (group_slots_.empty()) return absl::OkStatus();
  if (absl::Status grown = GrowStepBuffers(num_tokens); !grown.ok()) return grown;
  backend_->UploadBytes(host_groups_.data(), row_groups_->raw(), num_tokens * sizeof(int32_t));
  return backend_->status();
}

absl::Status CudaLoraSlots::Apply(LoraTarget target, const void* x, void* y, int64_t y_stride) {
  if (view_ == nullptr || group_slots_.empty() || num_tokens_ == 0) return absl::OkStatus();
  if (target.layer < 0 || target.layer >= num_layers_) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoRA layer ", target.layer, " is outside [0, ", num_layers_, ")"));
  }
  const int module = static_cast<int>(target.module);
  const LinearShape shape = shapes_[module];
  kernels::LoraParams params;
  params.x = x;
  params.y = y;
  params.in = shape.in;
  params.out = shape.out;
  params.y_stride = y_stride > 0 ? y_stride : shape.out;
  params.num_tokens = num_tokens_;
  params.row_group = static_cast<const int32_t*>(row_groups_->raw());
  params.scratch = static_cast<float*>(scratch_->raw());
  params.scratch_stride = max_rank_;
  params.dtype = dtype_;
  const int num_groups = static_cast<int>(group_slots_.size());
  for (int first = 0; first < num_groups; first += kernels::kLoraGroupsPerLaunch) {
    params.first_group = first;
    params.num_groups = std::min(kernels::kLoraGroupsPerLaunch, num_groups - first);
    bool any = false;
    for (int g = 0; g < params.num_groups; ++g) {
      const int slot = group_slots_[first + g];
      const uint8_t* base = static_cast<const uint8_t*>(SlotBase(slot));
      const int rank = view_->rank(slot, target);
      params.groups[g] =
          kernels::LoraGroupWeights{base + AOffset(target.layer, module),
                                    base + BOffset(target.layer, module), rank, view_->scale(slot)};
      any = any || rank > 0;
    }
    if (!any) continue;
    if (cudaError_t e = kernels::LaunchLora(params, backend_->stream()); e != cudaSuccess) {
      return CudaLoraError(e, "kernels");
    }
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker
