#include "worker/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/safetensors.h"
#include "common/speculation_limits.h"
#include "common/status_macros.h"
#include "common/tensor_parallel_plan.h"
#include "common/tensor_slice.h"
#include "kernels/ops/rope_cache.h"
#include "worker/kv_cache_scales.h"
#include "worker/llama_eagle3_parts.h"
#include "worker/sharded_weights.h"
#include "worker/weight_loader.h"

namespace pagoda::worker {

namespace {

int HeadDim(const ModelConfig& config) {
  return config.head_dim > 0 ? config.head_dim : config.hidden_size / config.num_attention_heads;
}

int KvHeads(const ModelConfig& config) {
  return config.num_key_value_heads > 0 ? config.num_key_value_heads : config.num_attention_heads;
}

// An f32 buffer in backend memory holding `host`.
std::unique_ptr<Buffer> UploadF32(Backend* backend, const std::vector<float>& host) {
  auto buffer = backend->Allocate(DType::kF32, host.size());
  backend->UploadBytes(host.data(), buffer->raw(), host.size() * sizeof(float));
  return buffer;
}

// Weights as the ops take them: a [rows, cols] matrix, a vector, a bias
// (null when the layer has none).
Tensor Matrix(const std::unique_ptr<Buffer>& buffer, int64_t rows, int64_t cols) {
  return Tensor::Of(*buffer, {rows, cols});
}
Tensor Vector(const std::unique_ptr<Buffer>& buffer) {
  return Tensor::Of(*buffer, {static_cast<int64_t>(buffer->size())});
}

// The rotary inverse frequencies of `config`, every scaling folded in.
std::vector<double> RopeInvFreq(const ModelConfig& config) {
  return kernels::ComputeRopeInvFreq(config.head_dim, config.rope_theta, config.rope_scaling);
}

// Shapes of one layer's checkpoint tensors (the whole model's) and this
// rank's slices of them.
struct LayerGeometry {
  int64_t hidden;
  int64_t intermediate;
  int64_t q_dim;
  int64_t kv_dim;
  LayerSlices slices;
  bool attention_bias;
  int64_t qkv_in = 0;  // q/k/v's input width; 0: hidden (2 * hidden in EAGLE-3).
};

}  // namespace

struct LlamaModel::LayerWeights {
  std::unique_ptr<Buffer> input_norm, post_attention_norm;
  // [q_dim + 2 * kv_dim, hidden]: query rows, then key rows, then value rows
  // (vLLM's QKVParallelLinear), so one product serves all three; with the
  // f32 bias in the same order when the config has attention_bias.
  std::unique_ptr<Linear> qkv_proj;
  std::unique_ptr<Linear> o_proj;
  std::unique_ptr<Linear> gate_up_proj;  // [2 * intermediate, hidden]: gate rows, then up rows.
  std::unique_ptr<Linear> down_proj;
  KvCacheScales kv_scales;  // Used by an FP8 KV cache only.
  int index = 0;            // In the model: which of the adapters' layers apply.

  // Layer `index`'s tensors (this rank's slices) in backend memory, named
  // `prefix` + "<tensor>" (prefix "model.layers.<index>."); without input_layernorm (left null)
  // when `identity_input_norm` (an EAGLE head's first layer).
  static absl::StatusOr<std::unique_ptr<LayerWeights>> Load(WeightLoader& loader,
                                                            const std::string& prefix, int index,
                                                            const LayerGeometry& geometry,
                                                            DType act, bool identity_input_norm);
};

absl::StatusOr<std::unique_ptr<LlamaModel::LayerWeights>> LlamaModel::LayerWeights::Load(
    WeightLoader& loader, const std::string& prefix, int index, const LayerGeometry& geometry,
    DType act, bool identity_input_norm) {
  const int64_t hidden = geometry.hidden;
  const int64_t qkv_in = geometry.qkv_in > 0 ? geometry.qkv_in : hidden;
  const int64_t inter = geometry.intermediate;
  const int64_t q_dim = geometry.q_dim;
  const int64_t kv_dim = geometry.kv_dim;
  const LayerSlices& slices = geometry.slices;
  auto layer = std::make_unique<LayerWeights>();
  layer->index = index;
  if (!identity_input_norm) {
    PAGODA_ASSIGN_OR_RETURN(layer->input_norm,
                            loader.Load(prefix + "input_layernorm.weight", {hidden}));
  }
  PAGODA_ASSIGN_OR_RETURN(layer->post_attention_norm,
                          loader.Load(prefix + "post_attention_layernorm.weight", {hidden}));
  PAGODA_ASSIGN_OR_RETURN(
      layer->qkv_proj, loader.LoadLinear({{prefix + "self_attn.q_proj", q_dim, qkv_in, slices.q},
                                          {prefix + "self_attn.k_proj", kv_dim, qkv_in, slices.kv},
                                          {prefix + "self_attn.v_proj", kv_dim, qkv_in, slices.kv}},
                                         geometry.attention_bias, act));
  PAGODA_ASSIGN_OR_RETURN(
      layer->o_proj,
      loader.LoadLinear({{prefix + "self_attn.o_proj", hidden, q_dim, slices.o}}, false, act));
  PAGODA_ASSIGN_OR_RETURN(
      layer->gate_up_proj,
      loader.LoadLinear({{prefix + "mlp.gate_proj", inter, hidden, slices.gate_up},
                         {prefix + "mlp.up_proj", inter, hidden, slices.gate_up}},
                        false, act));
  PAGODA_ASSIGN_OR_RETURN(
      layer->down_proj,
      loader.LoadLinear({{prefix + "mlp.down_proj", hidden, inter, slices.down}}, false, act));
  return layer;
}

LlamaModel::LlamaModel(ModelConfig config, Backend* backend, Communicator* communicator)
    : config_(std::move(config)),
      backend_(backend),
      communicator_(communicator),
      workspace_(backend),
      uploader_(backend) {}

LlamaModel::~LlamaModel() = default;

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& model_dir,
                                                             Backend* backend,
                                                             Communicator* communicator,
                                                             const LlamaLoadOptions& options) {
  auto config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  if (absl::Status s = CompleteConfig(model_dir, &*config); !s.ok()) return s;
  // LlamaForCausalLMEagle3, Eagle3LlamaForCausalLM (common/model_config.cc).
  if (absl::StrContains(config->architecture, "Eagle3")) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, " is an EAGLE-3 head (", config->architecture,
                     "): serve it as --speculative-config's model with method eagle3"));
  }
  auto quant = LoadQuantConfig(model_dir);
  if (!quant.ok()) return quant.status();
  if (absl::Status s =
          CheckRequestedQuantization(&*quant, options.quantization, options.quantization_source);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckLoraLimits(options.max_loras, options.max_lora_rank, options.max_cpu_loras,
                          options.max_lora_trainable_tokens);
      !s.ok()) {
    return s;
  }
  auto shard = PlanTensorParallelShard(*config, communicator->rank(), communicator->world_size());
  if (!shard.ok()) return shard.status();
  std::unique_ptr<LlamaModel> model(
      new LlamaModel(RankLocalConfig(*config, *shard), backend, communicator));
  model->quant_config_ = *std::move(quant);
  model->whole_lm_head_on_rank0_ = options.whole_lm_head_on_rank0;
  if (absl::Status status = model->LoadWeights(model_dir, options.weight_dtype, *config, *shard);
      !status.ok()) {
    return status;
  }
  model->BuildRopeTable();
  if (options.max_loras > 0) {
    if (absl::Status s = model->EnableLora(options, *config, *shard); !s.ok()) return s;
  }
  model->ReserveLoadTimeWorkspace(options);
  return model;
}

absl::Status LlamaModel::CompleteConfig(const std::string& model_dir, ModelConfig* config) {
  if (config->head_dim <= 0) config->head_dim = HeadDim(*config);
  if (config->num_key_value_heads <= 0) config->num_key_value_heads = KvHeads(*config);
  if (config->head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, ": head_dim ", config->head_dim, " must be even for rotary"));
  }
  return absl::OkStatus();
}

void LlamaModel::ReserveLoadTimeWorkspace(const LlamaLoadOptions& options) {
  const int max_seqs = std::max(1, options.max_num_seqs);
  // Block tables are reserved for contexts up to the rope table's bound, so a
  // config claiming a huge context does not reserve memory no request uses
  // (a longer step grows the workspace once).
  const int64_t max_context =
      std::clamp(config_.max_position_embeddings, 1, kMaxRopeTablePositions);
  const int64_t block_size = std::max(1, options.block_size);
  const int tokens = std::max(1, options.max_num_batched_tokens);
  // A verify step's k + 1 rows a sequence, no more rows than tokens.
  const int k = std::clamp(options.num_speculative_tokens, 0, kMaxSpeculativeTokens);
  const int64_t verify_rows = int64_t{max_seqs} * (k + 1);
  row_logits_capacity_ =
      static_cast<int>(std::min(verify_rows, std::max<int64_t>(max_seqs, tokens)));
  reserved_tokens_ = tokens;
  if (lm_head_ != nullptr) lm_head_->ReserveRows(row_logits_capacity_);
  ReserveWorkspace(StepBatchCapacity{
      .tokens = tokens,
      .seqs = max_seqs,
      .blocks_per_seq = static_cast<int>((max_context + block_size - 1) / block_size),
      .logits_rows = row_logits_capacity_});
}

absl::Status LlamaModel::LoadWeights(const std::string& model_dir,
                                     std::optional<DType> weight_dtype,
                                     const ModelConfig& full_config,
                                     const TensorParallelShard& shard) {
  auto store = WeightStore::Open(model_dir);
  if (!store.ok()) return store.status();
  WeightLoader loader(**store, backend_, weight_dtype, quant_config_);
  const int64_t hidden = full_config.hidden_size;
  const int64_t vocab = full_config.vocab_size;
  model_dir_ = model_dir;
  // The embedding stays whole on every rank (a row lookup); the head is
  // split over the vocabulary, over the embedding's rows when tied.
  PAGODA_ASSIGN_OR_RETURN(embed_tokens_, loader.Load("model.embed_tokens.weight", {vocab, hidden}));
  PAGODA_ASSIGN_OR_RETURN(final_norm_, loader.Load("model.norm.weight", {hidden}));
  const bool own_head = (*store)->Has("lm_head.weight") || !config_.tie_word_embeddings;
  PAGODA_ASSIGN_OR_RETURN(lm_head_,
                          VocabParallelHead::Load({.loader = &loader,
                                                   .tied = own_head ? nullptr : embed_tokens_.get(),
                                                   .whole_on_rank0 = whole_lm_head_on_rank0_},
                                                  vocab, hidden, backend_, communicator_));
  return LoadLayers(loader, **store, "model.layers.", full_config, shard);
}

absl::Status LlamaModel::LoadLayers(WeightLoader& loader, const WeightStore& store,
                                    const std::string& layers_prefix,
                                    const ModelConfig& full_config,
                                    const TensorParallelShard& shard) {
  // Checkpoint shapes are the whole model's; `slices` cut this rank's part.
  const LayerGeometry geometry{
      .hidden = full_config.hidden_size,
      .intermediate = full_config.intermediate_size,
      .q_dim = static_cast<int64_t>(full_config.num_attention_heads) * full_config.head_dim,
      .kv_dim = static_cast<int64_t>(full_config.num_key_value_heads) * full_config.head_dim,
      .slices = PlanLayerSlices(full_config, shard),
      .attention_bias = config_.attention_bias};
  const DType act = backend_->activation_dtype();
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    std::unique_ptr<LayerWeights> layer;
    PAGODA_ASSIGN_OR_RETURN(
        layer, LayerWeights::Load(loader, absl::StrCat(layers_prefix, i, "."), i, geometry, act,
                                  /*identity_input_norm=*/i == 0 && is_eagle_head()));
    PAGODA_ASSIGN_OR_RETURN(layer->kv_scales, ReadKvCacheScales(store, i));
    layers_.push_back(std::move(layer));
  }
  const std::vector<double> inv_freq = RopeInvFreq(config_);
  inv_freq_ = loader.ToBackend(std::vector<float>(inv_freq.begin(), inv_freq.end()));
  return absl::OkStatus();
}

absl::Status LlamaModel::LoadEagle3Layers(WeightLoader& loader, const std::string& prefix,
                                          const ModelConfig& full_config,
                                          const TensorParallelShard& shard) {
  LayerGeometry geometry{
      .hidden = full_config.hidden_size,
      .intermediate = full_config.intermediate_size,
      .q_dim = static_cast<int64_t>(full_config.num_attention_heads) * full_config.head_dim,
      .kv_dim = static_cast<int64_t>(full_config.num_key_value_heads) * full_config.head_dim,
      .slices = PlanLayerSlices(full_config, shard),
      .attention_bias = config_.attention_bias,
      .qkv_in = 2 * int64_t{full_config.hidden_size}};
  std::unique_ptr<LayerWeights> layer;
  PAGODA_ASSIGN_OR_RETURN(
      layer, LayerWeights::Load(loader, prefix, 0, geometry, backend_->activation_dtype(), false));
  eagle3_->input_norm = layer->input_norm.get();
  layers_.push_back(std::move(layer));
  geometry.qkv_in = 0;  // Later layers read the hidden state alone (vLLM's).
  for (int i = 1; i < config_.num_hidden_layers; ++i) {
    PAGODA_ASSIGN_OR_RETURN(layer,
                            LayerWeights::Load(loader, absl::StrCat("layers.", i, "."), i, geometry,
                                               backend_->activation_dtype(), false));
    layers_.push_back(std::move(layer));
  }
  const std::vector<double> inv_freq = RopeInvFreq(config_);
  inv_freq_ = loader.ToBackend(std::vector<float>(inv_freq.begin(), inv_freq.end()));
  return absl::OkStatus();
}

void LlamaModel::BuildRopeTable() {
  rope_positions_ = std::clamp(config_.max_position_embeddings, 1, kMaxRopeTablePositions);
  rope_cos_sin_ =
      UploadF32(backend_, kernels::BuildRopeCosSinCache(rope_positions_, RopeInvFreq(config_)));
}

// The activations of one step in the order Forward takes them, the logits
// rows, and the step batch's region.
void LlamaModel::ReserveWorkspace(const StepBatchCapacity& capacity) {
  const size_t t = static_cast<size_t>(capacity.tokens);
  const size_t rows = static_cast<size_t>(capacity.logits_rows);
  const size_t hidden = config_.hidden_size;
  const size_t q_dim = static_cast<size_t>(config_.num_attention_heads) * config_.head_dim;
  const size_t kv_dim = static_cast<size_t>(config_.num_key_value_heads) * config_.head_dim;
  const size_t inter = config_.intermediate_size;
  // An EAGLE head also takes its fc's input, [tokens, 2 * hidden]; an
  // EAGLE-3 head its fc's input (3 * hidden), two normed halves and the
  // midlayer's input (2 * hidden), and a second set of output rows.
  const size_t fc_input = is_eagle3_head() ? 7 * hidden : is_eagle_head() ? 2 * hidden : 0;
  const size_t activations = t * (3 * hidden + 2 * q_dim + 2 * kv_dim + 3 * inter + fc_input) +
                             rows * hidden * (is_eagle3_head() ? 2 : 1);
  // An EAGLE-3 head's logits rows over its draft vocabulary (smaller).
  const size_t logits_floats = rows * config_.vocab_size * (is_eagle3_head() ? 2 : 1);
  const size_t bytes = activations * DTypeSize(backend_->activation_dtype()) +
                       logits_floats * sizeof(float) + StepBatchUploader::RegionBytes(capacity);
  const size_t had = workspace_.capacity();
  workspace_.Reserve(bytes, /*regions=*/is_eagle3_head() ? 20 : 13);
  if (workspace_.capacity() != had) ++buffer_generation_;
  uploader_.Reserve(capacity);
}

size_t LlamaModel::weight_bytes() const {
  auto bytes = [](const std::unique_ptr<Buffer>& b) -> size_t { return b ? b->nbytes() : 0; };
  auto linear = [](const auto& l) -> size_t { return l ? l->weight_bytes() : 0; };
  // A tied head's rows are the embedding's (DenseLinear counts none).
  size_t total = bytes(embed_tokens_) + bytes(final_norm_) + linear(lm_head_) + linear(fc_) +
                 (eagle3_ ? bytes(eagle3_->hidden_norm) + linear(eagle3_->lm_head) : 0);
  for (const auto& layer : layers_) {
    total += bytes(layer->input_norm) + bytes(layer->post_attention_norm);
    for (const Linear* linear : {layer->qkv_proj.get(), layer->o_proj.get(),
                                 layer->gate_up_proj.get(), layer->down_proj.get()}) {
      total += linear->weight_bytes();
    }
  }
  return total;
}

KvCacheShape LlamaModel::CacheShape(int block_size, DType dtype) const {
  return KvCacheShape{.num_layers = config_.num_hidden_layers,
                      .num_kv_heads = config_.num_key_value_heads,
                      .block_size = block_size,
                      .head_dim = config_.head_dim,
                      .dtype = dtype};
}

StepBatch LlamaModel::UploadStep(const FlatBatch& batch, int row_logits) {
  StepBatchCapacity capacity = StepBatchUploader::CapacityOf(batch);
  capacity.logits_rows = std::max(capacity.logits_rows, row_logits);
  ReserveWorkspace(capacity);  // Allocates only past the load-time sizing.
  workspace_.Reset();
  return uploader_.Upload(batch, &workspace_);
}

absl::StatusOr<ForwardOutput> LlamaModel::Forward(const FlatBatch& batch, CacheEngine* cache) {
  const int row_logits = batch.wants_prompt_logprobs() ? row_logits_capacity_ : 0;
  const StepBatch step = UploadStep(batch, row_logits);
  // Adapters add to host f32 activations (the CPU backend's) or through
  // the slots' device store.
  if (batch.uses_lora &&
      (lora_loader_ == nullptr ||
       (lora_device_ == nullptr && backend_->activation_dtype() != DType::kF32))) {
    return absl::FailedPreconditionError("a step names LoRA slots this model does not serve");
  }
  step_lora_slots_ = batch.uses_lora ? batch.lora_slots.data() : nullptr;
  if (step_lora_slots_ != nullptr && lora_device_ != nullptr) {
    if (absl::Status s = lora_device_->BeginStep(lora_view_, step_lora_slots_, step.num_tokens);
        !s.ok()) {
      return s;
    }
  }
  const Activations activations = TakeActivations(static_cast<size_t>(step.num_tokens));
  backend_->Embedding(step, Matrix(embed_tokens_, config_.vocab_size, config_.hidden_size),
                      activations.residual);
  if (absl::Status s = ApplyLoraEmbedding(batch, activations.residual); !s.ok()) return s;
  TakeLogitsLoraSlots(batch);
  if (absl::Status s = RunLayers(step, cache, activations); !s.ok()) return s;
  absl::StatusOr<ForwardOutput> output = Logits(step, activations, row_logits);
  if (output.ok() && !aux_layers_.empty()) output->aux_hidden = aux_device_->raw();
  return output;
}

absl::Status LlamaModel::RunLayers(const StepBatch& step, CacheEngine* cache,
                                   const Activations& activations, int first_layer) {
  const float eps = static_cast<float>(config_.rms_norm_eps);
  for (int i = first_layer; i < config_.num_hidden_layers; ++i) {
    const LayerWeights& layer = *layers_[i];
    Activations attention_input = activations;
    // Pre-norm residual stream: the previous layer's MLP output is added to
    // the residual in the same pass that normalises it. An EAGLE head's
    // first layer has no input norm (vLLM's identity): its attention reads
    // the fc output, which is also the residual.
    if (layer.input_norm == nullptr) {
      attention_input.normed = activations.residual;
    } else if (i == 0) {
      backend_->RmsNorm(activations.residual, Vector(layer.input_norm), step.num_tokens, eps,
                        activations.normed);
    } else {
      backend_->AddRmsNorm(activations.residual, activations.projected, Vector(layer.input_norm),
                           step.num_tokens, eps, activations.normed);
    }
    CaptureAuxHidden(i, step.num_tokens, activations.residual);
    if (absl::Status s = AttentionBlock(layer, cache->layer(i), step, attention_input); !s.ok()) {
      return s;
    }
    if (absl::Status s = MlpBlock(layer, step.num_tokens, activations); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Taken in the order ReserveWorkspace sized them (after the step batch), so
// a step the load-time reservation covers allocates nothing.
LlamaModel::Activations LlamaModel::TakeActivations(size_t tokens) {
  const DType act = backend_->activation_dtype();
  const size_t hidden = config_.hidden_size;
  const size_t q_dim = static_cast<size_t>(config_.num_attention_heads) * config_.head_dim;
  const size_t kv_dim = static_cast<size_t>(config_.num_key_value_heads) * config_.head_dim;
  const size_t inter = config_.intermediate_size;
  const size_t width = DTypeSize(act);
  Activations a;
  a.residual = workspace_.Take(act, tokens * hidden);
  a.normed = workspace_.Take(act, tokens * hidden);
  a.q = workspace_.Take(act, tokens * (q_dim + 2 * kv_dim));
  a.k = static_cast<char*>(a.q) + q_dim * width;
  a.v = static_cast<char*>(a.k) + kv_dim * width;
  a.qkv_stride = static_cast<int64_t>(q_dim + 2 * kv_dim);
  a.attention = workspace_.Take(act, tokens * q_dim);
  a.projected = workspace_.Take(act, tokens * hidden);
  a.gate_up = workspace_.Take(act, tokens * 2 * inter);
  a.activated = workspace_.Take(act, tokens * inter);
  return a;
}

absl::Status LlamaModel::AttentionBlock(const LayerWeights& layer, const KvCacheLayer& kv,
                                        const StepBatch& step, const Activations& a) {
  const int tokens = step.num_tokens;
  const int heads = config_.num_attention_heads;
  const int head_dim = config_.head_dim;
  // One product for q, k and v (vLLM's QKVParallelLinear): on a GPU, three
  // would be two more GEMMs a layer, each with a split-K reduction at decode
  // batch sizes (docs/gpu.md). Rotary, the cache write and attention read
  // its rows through the stride.
  layer.qkv_proj->Forward(a.normed, tokens, a.q);
  // The fused output's modules, each updated through the row stride.
  for (auto [module, y] : {std::pair{LoraModule::kQ, a.q}, std::pair{LoraModule::kK, a.k},
                           std::pair{LoraModule::kV, a.v}}) {
    if (absl::Status s = ApplyLora(layer.index, module, a.normed, tokens, y, a.qkv_stride);
        !s.ok()) {
      return s;
    }
  }
  const RopeTable rope{.cos_sin = rope_cos_sin_->data(),
                       .inv_freq = inv_freq_->data(),
                       .max_positions = rope_positions_};
  KvCacheLayer cache = kv;
  // Other caches hold K and V as they are.
  if (kv.dtype == DType::kFp8E4M3 || kv.dtype == DType::kFp8E5M2) {
    cache.k_scale = layer.kv_scales.k;
    cache.v_scale = layer.kv_scales.v;
  }
  backend_->RopeAndWriteKvCache(a.q, a.k, a.v, a.qkv_stride, step, heads, head_dim, rope, cache);
  backend_->PagedAttention(PagedAttentionParams{
      .query = a.q,
      .query_token_stride = a.qkv_stride,
      .output = a.attention,
      .cache = cache,
      .num_heads = heads,
      .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))),
      .batch = &step});
  layer.o_proj->Forward(a.attention, tokens, a.projected);
  // Row-parallel: the adapter's partial output joins the all-reduce below.
  if (absl::Status s = ApplyLora(layer.index, LoraModule::kO, a.attention, tokens, a.projected,
                                 config_.hidden_size);
      !s.ok()) {
    return s;
  }
  // Row-parallel o_proj: each rank holds a partial sum over its heads.
  return AllReduceHidden(a.projected, tokens);
}

absl::Status LlamaModel::MlpBlock(const LayerWeights& layer, int tokens, const Activations& a) {
  const int inter = config_.intermediate_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  backend_->AddRmsNorm(a.residual, a.projected, Vector(layer.post_attention_norm), tokens, eps,
                       a.normed);
  layer.gate_up_proj->Forward(a.normed, tokens, a.gate_up);
  // Gate rows, then up rows, each updated through the row stride.
  void* up = static_cast<char*>(a.gate_up) + inter * DTypeSize(backend_->activation_dtype());
  for (auto [module, y] :
       {std::pair{LoraModule::kGate, a.gate_up}, std::pair{LoraModule::kUp, up}}) {
    if (absl::Status s = ApplyLora(layer.index, module, a.normed, tokens, y, 2 * inter); !s.ok()) {
      return s;
    }
  }
  backend_->SiluAndMul(a.gate_up, tokens, inter, a.activated);
  layer.down_proj->Forward(a.activated, tokens, a.projected);
  if (absl::Status s = ApplyLora(layer.index, LoraModule::kDown, a.activated, tokens, a.projected,
                                 config_.hidden_size);
      !s.ok()) {
    return s;
  }
  // Row-parallel down_proj: partial sums over the intermediate slices.
  return AllReduceHidden(a.projected, tokens);
}

// Tensor-parallel sum of the activations, in their dtype; a failed
// collective ends the step with its status.
absl::Status LlamaModel::AllReduceHidden(void* data, int tokens) {
  return communicator_->AllReduceSum(data, static_cast<size_t>(tokens) * config_.hidden_size,
                                     backend_->activation_dtype());
}

absl::StatusOr<ForwardOutput> LlamaModel::Logits(const StepBatch& step, const Activations& a,
                                                 int row_logits_capacity) {
  const int rows = step.num_logits_rows;
  const int hidden = config_.hidden_size;
  const int vocab = config_.vocab_size;
  ForwardOutput output;
  output.sampling = step.sampling;
  output.logits.dtype = DType::kF32;
  output.logits.rank = 2;
  // Only rank 0 samples; every rank computes its part of a split head's
  // logits, and another rank of an unsplit one computes the final norm only
  // for a head sharded beside it (KeepFinalHidden).
  const bool samples = communicator_->rank() == 0;
  const bool computes_logits = samples || lm_head_->split();
  output.logits.shape = {samples ? rows : 0, vocab, 0, 0};
  const bool wants_rows = computes_logits && (rows > 0 || row_logits_capacity > 0);
  if (!wants_rows && !keeps_final_hidden_) return output;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (config_.num_hidden_layers == 0) {
    backend_->RmsNorm(a.residual, Vector(final_norm_), step.num_tokens, eps, a.normed);
  } else {
    backend_->AddRmsNorm(a.residual, a.projected, Vector(final_norm_), step.num_tokens, eps,
                         a.normed);
  }
  if (!computes_logits) {
    output.final_hidden = a.normed;
    return output;
  }
  const DType act = backend_->activation_dtype();
  const int logits_rows = std::max(rows, row_logits_capacity);
  void* last_hidden = workspace_.Take(act, static_cast<size_t>(logits_rows) * hidden);
  auto* logits = samples ? static_cast<float*>(workspace_.Take(
                               DType::kF32, static_cast<size_t>(logits_rows) * vocab))
                         : nullptr;
  if (row_logits_capacity > 0 || keeps_final_hidden_) output.final_hidden = a.normed;
  if (row_logits_capacity > 0) {
    output.row_logits = logits;
    output.row_logits_capacity = logits_rows;
  }
  if (rows == 0) return output;
  backend_->GatherRows(a.normed, step, hidden, last_hidden);
  const int32_t* row_slots = logits_lora_slots_.empty() ? nullptr : logits_lora_slots_.data();
  if (absl::Status s = RowLogits(last_hidden, rows, logits, row_slots); !s.ok()) return s;
  output.logits.data = logits;
  return output;
}

absl::Status LlamaModel::RowLogits(const void* hidden, int rows, float* logits,
                                   const int32_t* row_slots) {
  if (absl::Status s = lm_head_->Forward(hidden, rows, logits); !s.ok()) return s;
  if (row_slots == nullptr || logits == nullptr || communicator_->rank() != 0 ||
      lora_loader_ == nullptr || lora_device_ != nullptr) {
    return absl::OkStatus();
  }
  const LoraParallelFor on_pool = [this](int64_t n, int64_t grain, const auto& fn) {
    backend_->HostParallelFor(n, grain, fn);
  };
  return lora_view_.ApplyLmHead(static_cast<const float*>(hidden), rows, row_slots, logits,
                                config_.vocab_size, &on_pool);
}

size_t LlamaModel::hidden_row_bytes() const {
  return static_cast<size_t>(config_.hidden_size) * DTypeSize(backend_->activation_dtype());
}

}  // namespace pagoda::worker
