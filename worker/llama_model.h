#ifndef PAGODA_WORKER_LLAMA_MODEL_H_
#define PAGODA_WORKER_LLAMA_MODEL_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/model_config.h"
#include "common/tensor_parallel_plan.h"
#include "worker/backend.h"
#include "worker/batch.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"

namespace pagoda::worker {

// How a model is loaded.
struct LlamaLoadOptions {
  // The dtype weights are kept in, in backend memory. nullopt ("auto", as
  // vLLM's --dtype): each tensor's checkpoint dtype, so bf16 and f16
  // checkpoints are not widened. Biases and the rope tables are always f32.
  std::optional<DType> weight_dtype;
  // The workspace is sized at load for steps of up to this many tokens and
  // sequences (a bigger step grows it once, allocating).
  int max_num_batched_tokens = 256;
  int max_num_seqs = 32;
};

// A Llama-family decoder (LlamaForCausalLM, Qwen2ForCausalLM) written against
// the Backend ops: weights live in backend memory in the options' dtype and
// products accumulate in f32. The forward runs over a flattened batch of any
// mix of prefill and decode tokens, with its activations in one workspace
// reserved at load, so a step allocates no backend memory. Thread safety: one
// caller at a time.
class LlamaModel {
 public:
  // Reads config.json and this rank's slices of the safetensors of
  // `model_dir` (the rank and group size are the communicator's; see
  // sharded_weights.h for the split). Missing or mis-shaped tensors fail with
  // the WeightStore's error (naming the tensor); a model whose head counts or
  // intermediate size do not split over the group fails INVALID_ARGUMENT
  // naming the counts. backend and communicator must outlive the model.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(const std::string& model_dir,
                                                          Backend* backend,
                                                          Communicator* communicator,
                                                          const LlamaLoadOptions& options = {});
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;
  ~LlamaModel();

  // The model as this rank runs it: attention heads, KV heads and
  // intermediate size are the rank's shares (the model's with one rank).
  const ModelConfig& config() const { return config_; }
  // Bytes of backend memory the weights take (rope tables excluded).
  size_t weight_bytes() const;
  // The KV cache geometry this model needs for `block_size`-token blocks.
  KvCacheShape CacheShape(int block_size) const;

  // Runs every token of `batch`, writing its K/V into `cache` at the batch's
  // slots and attending through the batch's block tables, and returns the
  // logits of the batch's logits_indices rows: [logits_indices.size(),
  // vocab_size], row-major, host memory. Ranks other than 0 return an empty
  // vector: they take part in the layers' all-reduces but do not sample.
  // A failed collective (a peer gone, a timeout, Abort) is returned as its
  // status (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED); the cache then holds
  // partial writes of this step, so the group must be rebuilt.
  // REQUIRES: batch came from FlattenStepPlan with this cache's limits and
  // cache->shape() == CacheShape(block size).
  absl::StatusOr<std::vector<float>> Forward(const FlatBatch& batch, CacheEngine* cache);

 private:
  struct LayerWeights;
  LlamaModel(ModelConfig config, Backend* backend, Communicator* communicator);
  absl::Status LoadWeights(const std::string& model_dir, std::optional<DType> weight_dtype,
                           const ModelConfig& full_config, const TensorParallelShard& shard);
  void BuildRopeTable();
  // Reserves the workspace for a step of `tokens` tokens and `rows` logits rows.
  void ReserveWorkspace(int tokens, int rows);

  ModelConfig config_;
  Backend* backend_;
  Communicator* communicator_;
  std::unique_ptr<Buffer> embed_tokens_;
  std::unique_ptr<Buffer> final_norm_;
  // Null when tied (embed_tokens_ is used) and on ranks other than 0.
  std::unique_ptr<Buffer> lm_head_;
  std::unique_ptr<Buffer> inv_freq_;
  std::unique_ptr<Buffer> rope_cos_sin_;  // [rope_positions_, head_dim]
  int rope_positions_ = 0;
  std::vector<std::unique_ptr<LayerWeights>> layers_;
  Workspace workspace_;
};

// Rotary inverse frequencies (head_dim / 2 of them) with the config's
// scaling applied (none, linear, llama3), as Hugging Face computes them.
std::vector<double> RopeInverseFrequencies(const ModelConfig& config);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LLAMA_MODEL_H_
