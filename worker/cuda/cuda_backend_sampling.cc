// CudaBackend's sampling: logits processing (penalties, edits, token masks)
// and token sampling on the device, the results brought back in one copy.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "kernels/ops/logits_processing.h"
#include "kernels/ops/sampling.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_backend_impl.h"

namespace pagoda::worker {

using cuda_backend_internal::AlignUp;

const float* CudaBackend::ProcessLogits(const Tensor& logits, const SamplingBatch& params) {
  if (!params.has_edits) return nullptr;
  const int rows = params.num_rows;
  const int vocab = static_cast<int>(logits.dim(1));
  if (!Check(impl_->processed_logits.Reserve(sizeof(float) * rows * vocab), "processed logits")) {
    return nullptr;
  }
  auto* processed = reinterpret_cast<float*>(impl_->processed_logits.get());
  const cudaError_t launched = kernels::LaunchLogitsProcessing(
      kernels::LogitsProcessingParams{.logits = static_cast<const float*>(logits.data),
                                      .logits_stride = logits.dim(1),
                                      .num_rows = rows,
                                      .vocab_size = vocab,
                                      .penalties = params.penalties,
                                      .edit_offsets = params.edit_offsets,
                                      .edits = params.edits,
                                      .mask_offsets = params.mask_offsets,
                                      .token_masks = params.token_masks,
                                      .processed = processed},
      stream_);
  return Check(launched, "logits processing") ? processed : nullptr;
}

void CudaBackend::Sample(const Tensor& logits, const SamplingBatch& params, SampleResults* out) {
  const int rows = params.num_rows;
  const int k = params.num_logprobs;
  out->num_logprobs = k;
  out->token_ids.resize(rows);
  out->logprobs.resize(rows);
  out->top_ids.resize(size_t{1} * rows * k);
  out->top_logprobs.resize(size_t{1} * rows * k);
  if (rows == 0) return;
  if (logits.dtype != DType::kF32) {
    return Fail(absl::InvalidArgumentError("Sample needs f32 logits"));
  }
  // One packed region on the device and its pinned mirror: ids, logprobs,
  // top ids, top logprobs (4-byte elements each), so one copy brings all back.
  const size_t ids_bytes = AlignUp(size_t{4} * rows);
  const size_t top_bytes = AlignUp(size_t{4} * rows * std::max(k, 1));
  const size_t total = 2 * ids_bytes + 2 * top_bytes;
  if (!Check(impl_->sample_out.Reserve(total), "sampling scratch") ||
      !Check(impl_->sample_host.Reserve(total), "sampling staging")) {
    return;
  }
  auto* base = static_cast<uint8_t*>(impl_->sample_out.get());
  auto* ids = reinterpret_cast<int32_t*>(base);
  auto* logprobs = reinterpret_cast<float*>(base + ids_bytes);
  auto* top_ids = reinterpret_cast<int32_t*>(base + 2 * ids_bytes);
  auto* top_logprobs = reinterpret_cast<float*>(base + 2 * ids_bytes + top_bytes);
  const float* processed = ProcessLogits(logits, params);
  if (params.has_edits && processed == nullptr) return;
  const cudaError_t launched = kernels::LaunchTokenSampling(
      kernels::TokenSamplingParams{.logits = static_cast<const float*>(logits.data),
                                   .logits_stride = logits.dim(1),
                                   .num_rows = rows,
                                   .vocab_size = static_cast<int>(logits.dim(1)),
                                   .temperatures = params.temperatures,
                                   .top_k = params.top_k,
                                   .top_p = params.top_p,
                                   .seeds = params.seeds,
                                   .sample_indices = params.sample_indices,
                                   .num_logprobs = k,
                                   .sampled_ids = ids,
                                   .sampled_logprobs = logprobs,
                                   .top_ids = k > 0 ? top_ids : nullptr,
                                   .top_logprobs = k > 0 ? top_logprobs : nullptr,
                                   .sampling_logits = processed,
                                   .processed_logprobs = params.processed_logprobs,
                                   .min_p = params.min_p},
      stream_);
  if (!Check(launched, "token sampling") ||
      !Check(
          cudaMemcpyAsync(impl_->sample_host.get(), base, total, cudaMemcpyDeviceToHost, stream_),
          "sampling download")) {
    return;
  }
  Synchronize();
  const uint8_t* host = impl_->sample_host.get();
  std::memcpy(out->token_ids.data(), host, size_t{4} * rows);
  std::memcpy(out->logprobs.data(), host + ids_bytes, size_t{4} * rows);
  std::memcpy(out->top_ids.data(), host + 2 * ids_bytes, size_t{4} * rows * k);
  std::memcpy(out->top_logprobs.data(), host + 2 * ids_bytes + top_bytes, size_t{4} * rows * k);
}

}  // namespace pagoda::worker
