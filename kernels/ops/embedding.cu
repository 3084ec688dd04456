#include "kernels/ops/embedding.h"

namespace pagoda::kernels {
namespace {

// A pure row copy: VecT is 16 bytes when rows and pointers allow, else one
// element. One thread block per token.
template <typename VecT>
__global__ void EmbeddingKernel(const int32_t* __restrict__ token_ids,
                                const VecT* __restrict__ table, VecT* __restrict__ out,
                                int32_t* error_flag, int vecs_per_row, int64_t vocab_size) {
  const int64_t token = blockIdx.x;
  const int64_t id = token_ids[token];
  VecT* out_row = out + token * vecs_per_row;
  if (id < 0 || id >= vocab_size) {
    if (threadIdx.x == 0 && error_flag != nullptr) *error_flag = 1;
    for (int i = threadIdx.x; i < vecs_per_row; i += blockDim.x) out_row[i] = VecT{};
    return;
  }
  const VecT* row = table + id * vecs_per_row;
  for (int i = threadIdx.x; i < vecs_per_row; i += blockDim.x) out_row[i] = row[i];
}

template <typename VecT>
cudaError_t LaunchAs(const EmbeddingParams& p, cudaStream_t stream) {
  const int vecs_per_row =
      static_cast<int>(p.hidden * static_cast<int64_t>(ScalarTypeSize(p.dtype)) / sizeof(VecT));
  const int threads = vecs_per_row >= 256 ? 256 : ((vecs_per_row + 31) / 32) * 32;
  EmbeddingKernel<VecT><<<p.num_tokens, threads, 0, stream>>>(
      p.token_ids, static_cast<const VecT*>(p.table), static_cast<VecT*>(p.out), p.error_flag,
      vecs_per_row, p.vocab_size);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchEmbedding(const EmbeddingParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden <= 0 || p.vocab_size <= 0 || p.token_ids == nullptr ||
      p.table == nullptr || p.out == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(ScalarTypeSize(p.dtype));
  const bool aligned = reinterpret_cast<uintptr_t>(p.table) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
  if (aligned && row_bytes % 16 == 0) return LaunchAs<uint4>(p, stream);
  if (ScalarTypeSize(p.dtype) == 4) return LaunchAs<uint32_t>(p, stream);
  return LaunchAs<uint16_t>(p, stream);
}

}  // namespace pagoda::kernels
