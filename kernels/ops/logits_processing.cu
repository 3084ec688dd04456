#include "kernels/ops/logits_processing.h"

namespace pagoda::kernels {
namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads) LogitsProcessingKernel(LogitsProcessingParams p) {
  const int r = blockIdx.x;
  const float* row = p.logits + r * p.logits_stride;
  float* out = p.processed + int64_t{r} * p.vocab_size;
  const LogitPenalties penalties = p.penalties[r];
  const uint32_t* mask = p.mask_offsets != nullptr && p.mask_offsets[r] >= 0
                             ? p.token_masks + p.mask_offsets[r]
                             : nullptr;
  for (int i = threadIdx.x; i < p.vocab_size; i += blockDim.x) {
    out[i] = TokenMaskAllows(mask, i) ? UneditedLogit(row[i], penalties) : -INFINITY;
  }
  __syncthreads();  // The edits overwrite the copy.
  for (int j = p.edit_offsets[r] + threadIdx.x; j < p.edit_offsets[r + 1]; j += blockDim.x) {
    const LogitEdit edit = p.edits[j];
    out[edit.token_id] = TokenMaskAllows(mask, edit.token_id)
                             ? ProcessLogit(row[edit.token_id], edit, penalties)
                             : -INFINITY;
  }
}

}  // namespace

cudaError_t LaunchLogitsProcessing(const LogitsProcessingParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.vocab_size <= 0 || p.logits_stride < p.vocab_size ||
      p.logits == nullptr || p.penalties == nullptr || p.edit_offsets == nullptr ||
      p.processed == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.num_rows == 0) return cudaSuccess;
  LogitsProcessingKernel<<<p.num_rows, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace pagoda::kernels
