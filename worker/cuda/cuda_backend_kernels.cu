#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/float_conversion.cuh"
#include "worker/cuda/cuda_backend_kernels.h"

namespace pagoda::worker {
namespace {

constexpr int kThreads = 256;

// One block per output row; 16-bit elements copied as they are.
__global__ void GatherRowsKernel(const uint16_t* src, const int32_t* rows, int dim, uint16_t* out) {
  const int64_t row = rows[blockIdx.x];
  const uint16_t* from = src + row * dim;
  uint16_t* to = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int c = threadIdx.x; c < dim; c += blockDim.x) to[c] = from[c];
}

__global__ void GatherRowsKernel32(const float* src, const int32_t* rows, int dim, float* out) {
  const int64_t row = rows[blockIdx.x];
  for (int c = threadIdx.x; c < dim; c += blockDim.x) {
    out[static_cast<int64_t>(blockIdx.x) * dim + c] = src[row * dim + c];
  }
}

template <typename T>
__global__ void AddBiasKernel(T* y, const float* bias, int cols) {
  T* row = y + static_cast<int64_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    row[c] = kernels::FromFloat<T>(kernels::ToFloat(row[c]) + bias[c]);
  }
}

// One thread per placeholder slot of the capacity; slots past the count
// (read on the device, for graph replays) do nothing.
__global__ void SubstituteLastSampledKernel(int32_t* token_ids, int num_tokens, const int32_t* rows,
                                            const int32_t* sources, const int32_t* num_rows,
                                            int capacity, const int32_t* last_sampled,
                                            int num_last) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int count = *num_rows;
  if (i >= capacity || i >= count) return;
  const int32_t row = rows[i];
  const int32_t source = sources[i];
  if (row < 0 || row >= num_tokens || source < 0 || source >= num_last) return;
  token_ids[row] = last_sampled[source];
}

}  // namespace

cudaError_t LaunchSubstituteLastSampled(int32_t* token_ids, int num_tokens, const int32_t* rows,
                                        const int32_t* sources, const int32_t* num_rows,
                                        int capacity, const int32_t* last_sampled, int num_last,
                                        cudaStream_t stream) {
  if (capacity == 0) return cudaSuccess;
  if (token_ids == nullptr || rows == nullptr || sources == nullptr || num_rows == nullptr ||
      last_sampled == nullptr || capacity < 0 || num_tokens < 0 || num_last < 0) {
    return cudaErrorInvalidValue;
  }
  const int blocks = (capacity + kThreads - 1) / kThreads;
  SubstituteLastSampledKernel<<<blocks, kThreads, 0, stream>>>(
      token_ids, num_tokens, rows, sources, num_rows, capacity, last_sampled, num_last);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const void* src, const int32_t* rows, int num_rows, int dim,
                             kernels::ScalarType dtype, void* out, cudaStream_t stream) {
  if (num_rows == 0) return cudaSuccess;
  if (src == nullptr || rows == nullptr || out == nullptr || num_rows < 0 || dim <= 0) {
    return cudaErrorInvalidValue;
  }
  if (dtype == kernels::ScalarType::kF32) {
    GatherRowsKernel32<<<num_rows, kThreads, 0, stream>>>(static_cast<const float*>(src), rows, dim,
                                                          static_cast<float*>(out));
  } else {
    GatherRowsKernel<<<num_rows, kThreads, 0, stream>>>(static_cast<const uint16_t*>(src), rows,
                                                        dim, static_cast<uint16_t*>(out));
  }
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(void* y, const float* bias, int rows, int cols, kernels::ScalarType dtype,
                          cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (y == nullptr || bias == nullptr || rows < 0 || cols <= 0) return cudaErrorInvalidValue;
  switch (dtype) {
    case kernels::ScalarType::kBF16:
      AddBiasKernel<<<rows, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(y), bias, cols);
      break;
    case kernels::ScalarType::kF16:
      AddBiasKernel<<<rows, kThreads, 0, stream>>>(static_cast<__half*>(y), bias, cols);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace pagoda::worker
