#ifndef PAGODA_KERNELS_OPS_LOGITS_PROCESSING_H_
#define PAGODA_KERNELS_OPS_LOGITS_PROCESSING_H_

// Writes each row's processed logits (common/logits_processing.h: masks,
// logit_bias, min_tokens' mask, repetition, frequency and presence
// penalties in vLLM v1's order) into `processed`, for the sampler to draw
// from (TokenSamplingParams::sampling_logits) while its logprobs stay those
// of the raw logits. One block per row: a copy of the row (every token
// masked when allowed_only or refused by the row's token mask), then one
// thread per edit (a refused token stays -inf); a row's edits name
// distinct tokens, so no two threads write one token.
//
// Thread safety: stateless; enqueues one kernel on `stream`.

#include <cuda_runtime.h>

#include <cstdint>

#include "common/logits_processing.h"

namespace pagoda::kernels {

struct LogitsProcessingParams {
  const float* logits = nullptr;  // [num_rows, vocab], row r at logits + r * logits_stride
  int64_t logits_stride = 0;
  int num_rows = 0;
  int vocab_size = 0;
  const LogitPenalties* penalties = nullptr;  // [num_rows]
  const int32_t* edit_offsets = nullptr;      // [num_rows + 1]
  const LogitEdit* edits = nullptr;           // ids in [0, vocab_size), distinct per row
  // Structured outputs: row r's token mask at token_masks + mask_offsets[r]
  // (ceil(vocab_size / 32) words, TokenMaskAllows), none when the offset is
  // -1 or mask_offsets is null.
  const int32_t* mask_offsets = nullptr;      // [num_rows]
  const uint32_t* token_masks = nullptr;
  float* processed = nullptr;                 // [num_rows, vocab_size], dense
};
cudaError_t LaunchLogitsProcessing(const LogitsProcessingParams& params, cudaStream_t stream);

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_OPS_LOGITS_PROCESSING_H_
