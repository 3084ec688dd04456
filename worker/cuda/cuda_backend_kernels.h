#ifndef PAGODA_WORKER_CUDA_CUDA_BACKEND_KERNELS_H_
#define PAGODA_WORKER_CUDA_CUDA_BACKEND_KERNELS_H_

// The small kernels the CUDA backend needs beyond kernels/ops: gathering the
// rows to score, adding an f32 bias to half-precision GEMM output (cuBLASLt's
// bias epilogue wants the bias in the output dtype, the model keeps biases in
// f32), and overlap's substitution of last sampled tokens into the uploaded
// token ids. Stateless launchers on `stream`.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::worker {

// out[i, :] = src[rows[i], :] for i < num_rows, `dim` elements of `dtype`
// per row; rows is device int32. REQUIRES: rows in range, out not aliasing src.
cudaError_t LaunchGatherRows(const void* src, const int32_t* rows, int num_rows, int dim,
                             kernels::ScalarType dtype, void* out, cudaStream_t stream);

// y[r, c] += bias[c] for r < rows, c < cols, y of `dtype` (bf16 or f16),
// bias f32; the sum is rounded once to `dtype`.
cudaError_t LaunchAddBias(void* y, const float* bias, int rows, int cols, kernels::ScalarType dtype,
                          cudaStream_t stream);

// Overlapped scheduling (SequenceStep.input_from_last_sample):
// token_ids[rows[i]] = last_sampled[sources[i]] for i < *num_rows, every
// pointer device int32. The count is read on the device and the grid sized
// for `capacity`, so one captured graph serves any number of placeholders up
// to it: only the buffers' contents change between replays. Rows or sources
// out of range, or *num_rows outside [0, capacity], write nothing for that
// entry (the host checked the plan; this keeps a stale buffer harmless).
// `last_sampled` holds `num_last` tokens, `token_ids` `num_tokens`.
cudaError_t LaunchSubstituteLastSampled(int32_t* token_ids, int num_tokens, const int32_t* rows,
                                        const int32_t* sources, const int32_t* num_rows,
                                        int capacity, const int32_t* last_sampled, int num_last,
                                        cudaStream_t stream);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_BACKEND_KERNELS_H_
