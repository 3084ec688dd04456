#ifndef PAGODA_WORKER_LLAMA_EAGLE3_PARTS_H_
#define PAGODA_WORKER_LLAMA_EAGLE3_PARTS_H_

// Eagle3HeadParts: what a LlamaModel that is an EAGLE-3 head (speculative
// decoding's eagle3 method) holds beside its Llama decoder layer: its hidden
// norm, its lm_head over the draft vocabulary and the draft-to-target id
// map, read by llama_eagle3_head.cc. docs/speculative-decoding.md.

#include <cstdint>
#include <memory>
#include <vector>

#include "worker/backend.h"
#include "worker/linear.h"
#include "worker/vocab_parallel_head.h"

namespace pagoda::worker {

struct Eagle3HeadParts {
  // The target layers whose inputs feed the fc; empty for a head without
  // aux hidden states (eagle_config.use_aux_hidden_state false, no fc).
  std::vector<int> aux_layers;
  int draft_vocab = 0;
  std::vector<int32_t> draft_to_target;  // d + d2t[d] for each draft id d.
  std::unique_ptr<Buffer> hidden_norm;   // midlayer.hidden_norm.weight [hidden].
  const Buffer* input_norm = nullptr;    // The midlayer's (its LayerWeights own it).
  // [draft_vocab, hidden], f32 out: this rank's rows of the draft vocabulary.
  std::unique_ptr<VocabParallelHead> lm_head;
  // vLLM's norm_before_residual: the residual is hidden_norm(hidden), not
  // the hidden itself.
  bool norm_before_residual = false;
  std::vector<float> draft_logits;  // Host [rows, draft_vocab].
  std::vector<float> logits;        // Host [rows, vocab_size].
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LLAMA_EAGLE3_PARTS_H_
