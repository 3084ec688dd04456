#ifndef PAGODA_KERNELS_OPS_EMBEDDING_H_
#define PAGODA_KERNELS_OPS_EMBEDDING_H_

// Token embedding lookup: out[t, :] = table[token_ids[t], :].
//
// Bounds are checked on the device, not trusted: an id outside
// [0, vocab_size) writes a row of zeros (never reads outside the table) and
// sets *error_flag to 1. The flag lets the caller fail the step after one
// cheap read-back, instead of validating every id on the host first.

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/scalar_type.h"

namespace pagoda::kernels {

struct EmbeddingParams {
  const int32_t* token_ids = nullptr;  // [num_tokens] device
  const void* table = nullptr;         // [vocab_size, hidden]
  void* out = nullptr;                 // [num_tokens, hidden]
  // Device int32, optional. Set to 1 on a bad id, never cleared here: the
  // caller zeroes it before the step.
  int32_t* error_flag = nullptr;
  int num_tokens = 0;
  int hidden = 0;
  int64_t vocab_size = 0;
  ScalarType dtype = ScalarType::kBF16;
};
cudaError_t LaunchEmbedding(const EmbeddingParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_EMBEDDING_H_
