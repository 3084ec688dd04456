#ifndef PAGODA_WORKER_CUDA_CUDA_BACKEND_KERNELS_H_
#define PAGODA_WORKER_CUDA_CUDA_BACKEND_KERNELS_H_

// The two small kernels the CUDA backend needs beyond kernels/ops: gathering
// the rows to score and adding an f32 bias to half-precision GEMM output
// (cuBLASLt's bias epilogue wants the bias in the output dtype, the model
// keeps biases in f32). Stateless launchers on `stream`.

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

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_BACKEND_KERNELS_H_
