#ifndef PAGODA_SCHEDULER_API_VLLM_ENGINE_CONVERT_H_
#define PAGODA_SCHEDULER_API_VLLM_ENGINE_CONVERT_H_

// The translation between vLLM's engine gRPC API and pagoda.v1: requests in,
// stream chunks and finish reasons out. Pure functions, no I/O.

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "pagoda/v1/generation.pb.h"
#include "vllm/grpc/engine/vllm_engine.pb.h"

// vLLM's engine gRPC API (proto/vllm/grpc/engine/vllm_engine.proto) mapped
// onto pagoda.v1: requests are translated into a pagoda.v1 GenerateRequest
// (then validated and run as any other), and pagoda.v1 stream messages back
// into vLLM's chunks and completes.
namespace pagoda::scheduler {

namespace vllm_api = ::vllm::grpc::engine;

// A vLLM request as Pagoda runs it.
struct VllmRequestPlan {
  pagoda::v1::GenerateRequest request;
  bool stream = false;
  // logprobs was set: the sampled tokens' logprobs come back, with the top
  // `logprobs` alternatives (0 = none).
  bool want_logprobs = false;
  int top_logprobs = 0;
};

// INVALID_ARGUMENT, naming the field ("sampling_params.prompt_logprobs: ..."),
// for what Pagoda cannot honour: structured-output constraints,
// prompt_logprobs, logprobs outside 0..20 (-1, "all", too), truncate_prompt_tokens,
// multimodal inputs, KV transfer parameters, a request without input.
// Values Pagoda can hold are checked later by the pagoda.v1 validator, whose
// messages name pagoda.v1's fields. `max_model_len` bounds an unset
// max_tokens ("up to the context", as vLLM).
absl::StatusOr<VllmRequestPlan> TranslateVllmRequest(const vllm_api::GenerateRequest& in,
                                                     int max_model_len);

// Turns one request's pagoda.v1 stream messages into vLLM responses, as
// vLLM's servicer sends them. With stream: a GenerateStreamChunk for every
// delta of a sequence with new tokens and for its last delta (possibly
// empty), then a GenerateComplete repeating that last delta; a client that
// adds up the chunks' token_ids has every token. Without: one
// GenerateComplete per sequence when it ends, with all its tokens.
// completion_tokens counts the sequence's tokens so far. Not thread-safe.
class VllmOutputConverter {
 public:
  VllmOutputConverter(const VllmRequestPlan& plan, int prompt_tokens, int num_sequences);

  std::vector<vllm_api::GenerateResponse> Convert(const pagoda::v1::GenerateResponse& delta);
  // For every sequence not yet ended (the request was aborted): with stream
  // its last, empty chunk, then a GenerateComplete with finish_reason "abort".
  std::vector<vllm_api::GenerateResponse> AbortRemaining();

 private:
  struct Sequence {
    std::vector<uint32_t> tokens;  // Not yet sent (without stream: all).
    pagoda::v1::SequenceOutput logprobs;  // Likewise, for their logprobs.
    uint32_t count = 0;                   // Tokens so far.
    bool ended = false;
  };
  // The tokens not yet sent, as a chunk (they stay pending).
  vllm_api::GenerateResponse Chunk(int index, const Sequence& seq) const;
  // The tokens not yet sent, as the sequence's complete; ends it.
  vllm_api::GenerateResponse Complete(int index, Sequence& seq, std::string_view finish_reason);
  void FillLogprobs(const pagoda::v1::SequenceOutput& from, vllm_api::OutputLogProbs* to) const;

  const bool stream_;
  const bool want_logprobs_;
  const int top_logprobs_;
  const uint32_t prompt_tokens_;
  uint32_t cached_tokens_ = 0;  // The latest delta's cached_prompt_token_count.
  std::vector<Sequence> sequences_;
};

}  // namespace pagoda::scheduler

#endif  // PAGODA_SCHEDULER_API_VLLM_ENGINE_CONVERT_H_
