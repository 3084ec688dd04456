#ifndef PAGODA_WORKER_LLAMA_MODEL_H_
#define PAGODA_WORKER_LLAMA_MODEL_H_

// LlamaModel: the Llama-family decoder (Llama, Qwen2) over the Backend
// interface: weights loaded from the checkpoint, a forward pass over one step.

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/model_config.h"
#include "common/tensor_parallel_plan.h"
#include "worker/backend.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/flat_batch.h"
#include "worker/linear.h"
#include "worker/lora/lora_adapter_loader.h"
#include "worker/lora/lora_slots.h"
#include "worker/quant/quant_config.h"
#include "worker/step_batch_upload.h"
#include "worker/vocab_parallel_head.h"
#include "worker/weight_loader.h"

namespace pagoda::worker {

struct Eagle3HeadParts;  // worker/llama_eagle3_parts.h

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
  // Speculative decoding's k (LoadModelRequest.num_speculative_tokens): a
  // verify step has up to k + 1 logits rows per sequence, so the workspace
  // is reserved for max_num_seqs * (k + 1) of them (at most one a token).
  int num_speculative_tokens = 0;
  // Keeps the lm_head whole on rank 0 (which computes the logits alone, the
  // other ranks waiting) instead of splitting it over the vocabulary: the
  // layout before vocabulary-parallel heads, bench_cpu_tp_decode's baseline.
  bool whole_lm_head_on_rank0 = false;
  // Block size of the KV cache: with max_position_embeddings it bounds the
  // block tables the step-batch region is reserved for.
  int block_size = 16;
  // vLLM's --quantization: "" or "auto" serves the checkpoint's
  // quantization_config; a name must match it (worker/quant/quant_config.h).
  std::string quantization = "";
  // What set `quantization`, for its refusal: the flag, or a draft's key.
  std::string quantization_source = "--quantization";
  // LoRA (docs/lora.md): adapter slots, each taking ranks up to
  // max_lora_rank; 0 serves no adapters. CheckLoraLimits bounds both.
  int max_loras = 0;
  int max_lora_rank = 0;
  int max_cpu_loras = 0;              // Adapters cached parsed on the host; 0: max_loras.
  int max_lora_trainable_tokens = 0;  // Per module of an adapter; 0: none.
  // A backend whose activations are not host f32 (CUDA) keeps the slots'
  // matrices on its device: this makes that store for the slots (shapes,
  // ranks) and steps of up to `max_tokens` tokens. Null: host slots.
  using LoraDeviceFactory = std::function<absl::StatusOr<std::shared_ptr<LoraDeviceSlots>>(
      const LoraSlots& slots, int max_tokens)>;
  LoraDeviceFactory lora_device = nullptr;
};

// What one forward pass leaves for sampling, in backend memory (the model's
// workspace): valid until the next Forward.
struct ForwardOutput {
  Tensor logits;           // [num_logits_rows, vocab_size] f32
  SamplingBatch sampling;  // One entry per logits row.
  // Rank 0 of a batch that wants prompt logprobs (null otherwise): every
  // token row's final-normed hidden state, [num_tokens, hidden_size]
  // activations, and room for row_logits_capacity rows of f32 logits
  // (where `logits` lies: use it once sampling is done), for RowLogits.
  // Also set, on every rank of a model told KeepFinalHidden (the target of
  // an EAGLE head, or of its shard: its features), for every batch.
  const void* final_hidden = nullptr;
  float* row_logits = nullptr;
  int row_logits_capacity = 0;
  // An EAGLE head's ForwardEagle: each logits row's output hidden state (the
  // feature of the head's next pass), [num_logits_rows, hidden_size]
  // activations. Null otherwise.
  const void* head_hidden = nullptr;
  // Every rank of a model told KeepAuxHidden (the target of an EAGLE-3 head):
  // every token row's residual stream entering each kept layer, in the
  // layers' order, [num_tokens, layers * hidden_size] activations in backend
  // memory, at one address from load on: a CUDA graph's replay writes them
  // there, and the caller reads them once the forward has run. Null
  // otherwise.
  const void* aux_hidden = nullptr;
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
  // An EAGLE(-1/2) head in `head_dir`, laid out as vLLM's
  // EagleLlamaForCausalLM loads it: config.json a Llama config whose
  // hidden_size and vocab_size are `target`'s, with num_hidden_layers >= 1;
  // tensors "fc.weight" [hidden, 2 * hidden] (and "fc.bias" when the
  // checkpoint has one) and "layers.<i>.*" of Llama decoder layers, layer 0
  // without input_layernorm (an identity: a checkpoint's own is ignored, as
  // vLLM does); no final norm. The head embeds tokens and computes logits
  // with `target`'s embed_tokens and lm_head (the head's own, if any, are
  // ignored, as vLLM does at pipeline size 1). A max_position_embeddings
  // below `target`'s max_positions() is raised to it (vLLM's; common/
  // eagle_head_positions.h): the head drafts at every position the target
  // serves. Dense weights only. Runs as
  // the one rank of `communicator`. INVALID_ARGUMENT naming both values for a
  // mismatch with the target; the loader's errors (naming the tensor and its
  // shape) otherwise. `target` must be rank 0 of its group and outlive the
  // head.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> LoadEagleHead(const std::string& head_dir,
                                                                   Backend* backend,
                                                                   Communicator* communicator,
                                                                   const LlamaLoadOptions& options,
                                                                   const LlamaModel& target);
  // An EAGLE-3 head in `head_dir`, laid out as vLLM's Eagle3LlamaForCausalLM
  // loads it (llama_eagle3_head.cc): config.json a Llama config of
  // num_hidden_layers >= 1 with `target`'s hidden_size and vocab_size,
  // draft_vocab_size (default vocab_size) and
  // eagle_aux_hidden_state_layer_ids (default (2, L / 2, L - 3) of the
  // target's L layers, each in [0, L)); tensors "fc.weight" [hidden, 3 *
  // hidden] (none, and no layer ids, with eagle_config.use_aux_hidden_state
  // false: the target's final-normed hidden state is the feature),
  // "midlayer.*" (or "layers.0.*") a Llama decoder layer whose q/k/v read
  // 2 * hidden plus "hidden_norm.weight", "layers.<i>.*" plain Llama layers
  // for i in [1, num_hidden_layers), "norm.weight",
  // "lm_head.weight" [draft_vocab_size, hidden], "d2t" (I64, draft id to
  // target id offset; required unless draft_vocab_size == vocab_size), and
  // "embed_tokens.weight" if the head has its own (else `target`'s). "t2d" is
  // ignored. One line naming the problem otherwise. As LoadEagleHead.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> LoadEagle3Head(const std::string& head_dir,
                                                                    Backend* backend,
                                                                    Communicator* communicator,
                                                                    const LlamaLoadOptions& options,
                                                                    const LlamaModel& target);
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;
  ~LlamaModel();

  bool is_eagle_head() const { return eagle_target_ != nullptr; }
  // Makes every later Forward leave ForwardOutput::final_hidden on this rank:
  // the final-normed hidden state of every token row (what vLLM's EAGLE
  // proposer takes from its target; after the all-reduces every rank holds
  // it whole, so a head sharded beside the target reads its own rank's).
  void KeepFinalHidden() { keeps_final_hidden_ = true; }
  // Makes every later Forward leave ForwardOutput::aux_hidden on this rank: the
  // residual stream entering each of `layers` (an EAGLE-3 head's features;
  // layer 0's is the embedding), in a buffer reserved now for the
  // load-time tokens (so no step after a CUDA graph capture allocates).
  // REQUIRES: each in [0, num_hidden_layers).
  void KeepAuxHidden(std::vector<int> layers);
  // Bumped whenever a buffer a forward writes (the workspace, the aux rows)
  // is reallocated: a CUDA graph captured before then writes freed memory
  // (CudaGraphRunner compares it and stops replaying).
  uint64_t buffer_generation() const { return buffer_generation_; }
  bool is_eagle3_head() const { return eagle3_ != nullptr; }
  // An EAGLE-3 head's target layers (empty for other models, and for an
  // EAGLE-3 head without aux hidden states).
  const std::vector<int>& eagle3_aux_layers() const;

  // The model as this rank runs it: attention heads, KV heads and
  // intermediate size are the rank's shares (the model's with one rank).
  const ModelConfig& config() const { return config_; }
  // Positions a step may use: the rotary table's size, or the config's
  // max_position_embeddings on a backend that computes positions past the
  // table (Backend::computes_rope_past_table).
  int max_positions() const {
    return backend_->computes_rope_past_table()
               ? std::max(rope_positions_, config_.max_position_embeddings)
               : rope_positions_;
  }
  // Bytes of backend memory the weights take (rope tables excluded).
  size_t weight_bytes() const;
  // The checkpoint's quantization (QuantMethod::kNone for dense weights).
  const QuantConfig& quant_config() const { return quant_config_; }
  // The KV cache geometry this model needs for `block_size`-token blocks of
  // `dtype` elements.
  KvCacheShape CacheShape(int block_size, DType dtype) const;

  // Uploads `batch` (one backend call), runs every token of it, writing its
  // K/V into `cache` at the batch's slots and attending through the batch's
  // block tables, and leaves the logits of the batch's logits_indices rows
  // in backend memory, with the rows' sampling parameters beside them.
  // Every rank computes its vocabulary rows of the logits (the lm_head is
  // vocabulary-parallel, VocabParallelHead), gathered to rank 0; the other
  // ranks' output has a 0-row tensor: only rank 0 samples. A failed collective (a
  // peer gone, a timeout, Abort) is returned as its status (UNAVAILABLE,
  // DEADLINE_EXCEEDED, ABORTED); the cache then holds partial writes of this
  // step, so the group must be rebuilt.
  // REQUIRES: batch came from FlattenStepPlan with this cache's limits and
  // cache->shape() == CacheShape(block size, its dtype).
  absl::StatusOr<ForwardOutput> Forward(const FlatBatch& batch, CacheEngine* cache);

  // An EAGLE head's forward over `batch`: token row t enters the layers as
  // fc(concat(embed(token t), features row t)), the layers write their K/V
  // into `cache` at the batch's slots, and each logits row's output (the
  // last layer's residual stream, no final norm) gives the logits through
  // the target's lm_head and ForwardOutput::head_hidden. `features` is host
  // memory: [batch.num_tokens(), hidden_size] activations.
  // An EAGLE-3 head (is_eagle3_head()) instead: row t's hidden is
  // fc(features row t) when `features_from_target` (rows [3 * hidden], the
  // target's aux_hidden), else features row t ([hidden], the head's own
  // output, or the target's final_hidden for a head without an fc); the
  // first layer reads concat(input_layernorm(embed(token)),
  // hidden_norm(hidden)), later layers the residual stream as Llama layers
  // do; the logits rows go through the head's norm and
  // lm_head, scattered to target ids by d2t (-inf elsewhere); head_hidden is
  // the pre-norm output.
  // REQUIRES: is_eagle_head(); as Forward.
  absl::StatusOr<ForwardOutput> ForwardEagle(const FlatBatch& batch, CacheEngine* cache,
                                             const void* features,
                                             bool features_from_target = true);

  // Puts the token masks that followed the plan (ApplyStepMasks on `batch`
  // after Forward) where the sampler reads them: `output`'s sampling arrays.
  // REQUIRES: `output` is the last Forward(batch, ...)'s.
  void UploadTokenMasks(const FlatBatch& batch, const ForwardOutput& output) {
    uploader_.UploadTokenMasks(batch, output.sampling);
  }

  // logits[r, :] = lm_head(hidden[r, :]) for `rows` rows: the logits of
  // token rows a Forward left in ForwardOutput::final_hidden (prompt
  // logprobs), on rank 0. A collective when splits_vocab(): every rank
  // calls it for the same rows (`logits` is ignored off rank 0); a failed
  // collective's status is returned. REQUIRES: hidden points at rows of
  // final_hidden, logits is ForwardOutput::row_logits, rows <=
  // row_logits_capacity. `row_slots` (null: none), each row's LoRA slot:
  // the adapters' lm_head updates are added on rank 0.
  absl::Status RowLogits(const void* hidden, int rows, float* logits,
                         const int32_t* row_slots = nullptr);
  // Whether the lm_head is split over more than one rank (so every rank
  // takes part in RowLogits, and keeps final_hidden for prompt logprobs).
  bool splits_vocab() const { return lm_head_ != nullptr && lm_head_->split(); }
  // Bytes between one hidden row and the next in final_hidden.
  size_t hidden_row_bytes() const;

  // LoRA: what loads adapters into this rank's slots (null when loaded with
  // max_loras 0); it outlives the model if held, and may run beside steps.
  std::shared_ptr<LoraAdapterLoader> lora_loader() const { return lora_loader_; }
  // Fixes the slots the next Forward applies to what they hold now, and
  // returns them for the plan's check (FlattenStepPlan); null without LoRA.
  const LoraSlots::View* PinLoraSlots();

 private:
  struct LayerWeights;
  LlamaModel(ModelConfig config, Backend* backend, Communicator* communicator);
  // Fills the head dimension and KV heads a config leaves out; refuses an
  // odd head dimension.
  static absl::Status CompleteConfig(const std::string& model_dir, ModelConfig* config);
  absl::Status LoadWeights(const std::string& model_dir, std::optional<DType> weight_dtype,
                           const ModelConfig& full_config, const TensorParallelShard& shard);
  // The decoder layers "<layers_prefix><i>.*" and the rotary frequencies.
  absl::Status LoadLayers(WeightLoader& loader, const WeightStore& store,
                          const std::string& layers_prefix, const ModelConfig& full_config,
                          const TensorParallelShard& shard);
  // An EAGLE-3 head's weights (llama_eagle3_head.cc) and its layers
  // (llama_model.cc): the first ("<prefix>*", the midlayer) with q/k/v
  // reading 2 * hidden, later ones "layers.<i>.*" plain Llama layers.
  absl::Status LoadEagle3Weights(const std::string& head_dir, std::optional<DType> weight_dtype,
                                 const ModelConfig& full_config, const TensorParallelShard& shard);
  absl::Status LoadEagle3Layers(WeightLoader& loader, const std::string& prefix,
                                const ModelConfig& full_config, const TensorParallelShard& shard);
  absl::StatusOr<ForwardOutput> ForwardEagle3(const FlatBatch& batch, CacheEngine* cache,
                                              const void* features, bool features_from_target);
  // Copies the residual stream (a.residual) entering layer `layer` into
  // its slots' columns of aux_device_ when it is one of aux_layers_, on the
  // device (Backend::CopyRows), where ForwardOutput::aux_hidden points (the
  // caller downloads them once the forward ran: after a graph's replay).
  // A step of more tokens than reserved grows the buffer (buffer_generation).
  void CaptureAuxHidden(int layer, int tokens, const void* residual);
  // Makes aux_device_ hold `tokens` rows.
  void ReserveAuxHidden(int tokens);
  absl::Status LoadWholeTargetHead(std::optional<DType> weight_dtype);
  absl::Status LoadEagleWeights(const std::string& head_dir, std::optional<DType> weight_dtype,
                                const ModelConfig& full_config, const TensorParallelShard& shard);
  void ReserveLoadTimeWorkspace(const LlamaLoadOptions& options);
  void BuildRopeTable();
  // Reserves the workspace (activations and the step-batch region) and the
  // upload staging for a step of this capacity.
  void ReserveWorkspace(const StepBatchCapacity& capacity);

  // The steps of Forward.
  // One step's activations, each [tokens, width] in the activation dtype.
  struct Activations {
    void* residual;
    void* normed;
    // The fused QKV product, [tokens, q_dim + 2 * kv_dim]: token t's q, k and
    // v heads at q, k and v + t * qkv_stride elements.
    void* q;
    void* k;
    void* v;
    int64_t qkv_stride;
    void* attention;
    void* projected;
    void* gate_up;
    void* activated;
  };
  // Sizes the workspace for `batch` (and `row_logits` logits rows), resets
  // it and uploads the batch into it.
  StepBatch UploadStep(const FlatBatch& batch, int row_logits);
  Activations TakeActivations(size_t tokens);
  // Every decoder layer from `first_layer` on over the step, from the
  // residual stream in a.residual (and, past layer 0, the previous layer's
  // MLP output in a.projected) to the last MLP's output in a.projected.
  absl::Status RunLayers(const StepBatch& step, CacheEngine* cache, const Activations& a,
                         int first_layer = 0);
  // An EAGLE head's output rows, their logits and head_hidden.
  absl::StatusOr<ForwardOutput> EagleLogits(const StepBatch& step, const Activations& a);
  absl::StatusOr<ForwardOutput> Eagle3Logits(const StepBatch& step, const Activations& a);
  // From the normalised input to o_proj's output in a.projected, summed over
  // the group; then from there through the MLP (with its residual add) back
  // to a.projected, summed. A failed collective's status ends the step.
  absl::Status AttentionBlock(const LayerWeights& layer, const KvCacheLayer& kv,
                              const StepBatch& step, const Activations& a);
  absl::Status MlpBlock(const LayerWeights& layer, int tokens, const Activations& a);
  absl::Status AllReduceHidden(void* data, int tokens);
  // Builds the adapter slots for this rank's projection shapes.
  absl::Status EnableLora(const LlamaLoadOptions& options, const ModelConfig& full_config,
                          const TensorParallelShard& shard);
  // After a target projection's Forward: adds the pinned adapters' updates
  // to the rows of `y` (row stride `y_stride` elements: a fused output's
  // module) whose sequence names one. Nothing when no row does.
  absl::Status ApplyLora(int layer, LoraModule module, const void* x, int tokens, void* y,
                         int64_t y_stride) const;
  // After the embedding: the adapters' embed_tokens updates of `batch`'s
  // token rows, on host f32 activations (the CPU backend's).
  absl::Status ApplyLoraEmbedding(const FlatBatch& batch, void* residual) const;
  // Each logits row's slot (its token row's), for Logits.
  void TakeLogitsLoraSlots(const FlatBatch& batch);
  // The final norm and the logits of the step's logits rows (on rank 0;
  // every rank computes its vocabulary part when the head is split).
  // With `row_logits_capacity` > 0 every token row is normalised and the
  // logits region holds at least that many rows (prompt logprobs).
  absl::StatusOr<ForwardOutput> Logits(const StepBatch& step, const Activations& a,
                                       int row_logits_capacity);

  ModelConfig config_;
  Backend* backend_;
  Communicator* communicator_;
  std::unique_ptr<Buffer> embed_tokens_;
  std::unique_ptr<Buffer> final_norm_;
  // The logits' product (f32 out), this rank's vocabulary rows: over
  // embed_tokens_ when tied. An EAGLE head's own only when it runs whole
  // beside a split target (it then needs every row); null otherwise.
  std::unique_ptr<VocabParallelHead> lm_head_;
  QuantConfig quant_config_;
  std::unique_ptr<Buffer> inv_freq_;
  std::unique_ptr<Buffer> rope_cos_sin_;  // [rope_positions_, head_dim]
  int rope_positions_ = 0;
  std::vector<std::unique_ptr<LayerWeights>> layers_;
  // Rows of logits a step that wants prompt logprobs has room for: the
  // load-time logits rows, so such a step needs no bigger workspace.
  int row_logits_capacity_ = 1;
  int reserved_tokens_ = 1;  // The load-time workspace's tokens.
  uint64_t buffer_generation_ = 0;
  Workspace workspace_;
  StepBatchUploader uploader_;
  std::shared_ptr<LoraAdapterLoader> lora_loader_;
  LoraSlots::View lora_view_;  // Pinned for the step (PinLoraSlots).
  // The running Forward's per-token slots (FlatBatch::lora_slots), or null
  // when no row of it names an adapter.
  const int32_t* step_lora_slots_ = nullptr;
  // Per logits row of the running Forward, its slot (TakeLogitsLoraSlots);
  // empty when no row names an adapter.
  std::vector<int32_t> logits_lora_slots_;
  LoraDeviceSlots* lora_device_ = nullptr;  // The slots' device store, if any.
  bool keeps_final_hidden_ = false;         // KeepFinalHidden.
  // An EAGLE head: the target whose embed_tokens and lm_head it uses, its
  // fc and an all-ones norm weight (EagleLogits).
  const LlamaModel* eagle_target_ = nullptr;
  std::string model_dir_;                // Where the weights came from (a whole head's lm_head).
  bool whole_lm_head_on_rank0_ = false;  // LlamaLoadOptions'.
  std::unique_ptr<Linear> fc_;
  std::unique_ptr<Buffer> ones_;
  // KeepAuxHidden: the layers and the last Forward's rows.
  std::vector<int> aux_layers_;
  std::unique_ptr<Buffer> aux_device_;  // [tokens, aux layers * hidden], reserved at load.
  // An EAGLE-3 head's own parts (llama_eagle3_head.cc); null otherwise.
  std::unique_ptr<Eagle3HeadParts> eagle3_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_LLAMA_MODEL_H_
