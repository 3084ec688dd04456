#ifndef PAGODA_WORKER_CUDA_CUDA_BACKEND_IMPL_H_
#define PAGODA_WORKER_CUDA_CUDA_BACKEND_IMPL_H_

// CudaBackend's private state, shared by its source files (cuda_backend.cc,
// cuda_backend_attention.cc, cuda_backend_sampling.cc, cuda_backend_fp8.cc,
// cuda_backend_int.cc): the grow-only device and pinned scratch memory its
// launches reuse from step to step. Included by those files only.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/kv_cache_storage.h"
#include "kernels/ops/gemm.h"
#include "worker/cuda/cuda_backend.h"

namespace pagoda::worker {
namespace cuda_backend_internal {

inline cudaError_t AllocateDevice(void** data, size_t bytes) { return cudaMalloc(data, bytes); }
inline cudaError_t FreeDevice(void* data) { return cudaFree(data); }
inline cudaError_t AllocatePinned(void** data, size_t bytes) {
  return cudaHostAlloc(data, bytes, cudaHostAllocDefault);
}
inline cudaError_t FreePinned(void* data) { return cudaFreeHost(data); }

// Grow-only memory from one allocator (never shrinks, so graph capture sees
// stable addresses).
template <cudaError_t (*kAllocate)(void**, size_t), cudaError_t (*kFree)(void*)>
class GrowOnly {
 public:
  GrowOnly() = default;
  GrowOnly(const GrowOnly&) = delete;
  GrowOnly& operator=(const GrowOnly&) = delete;
  ~GrowOnly() {
    if (data_ != nullptr) kFree(data_);
  }
  cudaError_t Reserve(size_t bytes) {
    if (bytes <= bytes_) return cudaSuccess;
    if (data_ != nullptr) kFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    const cudaError_t error = kAllocate(&data_, bytes);
    if (error == cudaSuccess) bytes_ = bytes;
    return error;
  }
  uint8_t* get() const { return static_cast<uint8_t*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};
using Scratch = GrowOnly<AllocateDevice, FreeDevice>;        // Device memory.
using PinnedScratch = GrowOnly<AllocatePinned, FreePinned>;  // Pinned host staging.

// `n` rounded up to 256 bytes, the alignment of cudaMalloc's own regions.
inline size_t AlignUp(size_t n) { return (n + 255) & ~size_t{255}; }

// How the kernels read a KV cache of `dtype` (an FP8 one by its format).
inline kernels::KvCacheStorage KvStorageOf(DType dtype) {
  if (dtype == DType::kFp8E4M3) return kernels::KvCacheStorage::kFp8E4M3;
  if (dtype == DType::kFp8E5M2) return kernels::KvCacheStorage::kFp8E5M2;
  return kernels::KvCacheStorage::kDType;
}

}  // namespace cuda_backend_internal

struct CudaBackend::Impl {
  std::unique_ptr<kernels::GemmContext> gemm;
  cuda_backend_internal::Scratch decode_workspace;  // Eager split-K decode; may grow.
  // Split-K decode inside graphs: sized once by ReserveDecodeWorkspace and
  // never grown by an eager step, so a captured graph's pointer stays valid.
  cuda_backend_internal::Scratch graph_decode_workspace;
  cuda_backend_internal::Scratch sample_out;         // Sampling results, packed (SampleLayout).
  cuda_backend_internal::Scratch processed_logits;   // Rows after logits processing; grows once.
  cuda_backend_internal::PinnedScratch sample_host;  // Their host mirror.
  cuda_backend_internal::Scratch block_args;         // CopyBlocks' pointer arrays and pairs.
  // FP8 linears' quantized inputs, their scales and the f32 product of one
  // row chunk: CudaBackend::kFp8ScratchBytes, allocated once at load.
  cuda_backend_internal::Scratch fp8_scratch;
  // Int linears' dequantized weight (prefill) or act-order inputs (decode),
  // grown at load to the largest weight (CudaBackend::ReserveIntScratch).
  cuda_backend_internal::Scratch int_scratch;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_BACKEND_IMPL_H_
