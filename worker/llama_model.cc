#include "worker/llama_model.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/tensor_parallel_plan.h"
#include "common/tensor_slice.h"
#include "kernels/ops/rope_cache.h"
#include "worker/sharded_weights.h"

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
const float* BiasOf(const std::unique_ptr<Buffer>& buffer) {
  return buffer ? buffer->data() : nullptr;
}

// The rotary inverse frequencies of `config`, every scaling folded in.
std::vector<double> RopeInvFreq(const ModelConfig& config) {
  return kernels::ComputeRopeInvFreq(config.head_dim, config.rope_theta, config.rope_scaling);
}

// Loads weight tensors (this rank's slices of them, see sharded_weights.h)
// into backend memory, one call per tensor, in the target dtype (or each
// tensor's stored dtype when there is none). Shapes are the checkpoint's.
class WeightLoader {
 public:
  struct Part {
    std::string name;
    std::vector<int64_t> shape;
    WeightSlice slice;
  };

  WeightLoader(const WeightStore& store, Backend* backend, std::optional<DType> dtype)
      : store_(store), backend_(backend), dtype_(dtype) {}

  absl::StatusOr<std::unique_ptr<Buffer>> Load(const std::string& name,
                                               const std::vector<int64_t>& shape,
                                               WeightSlice slice = WeightSlice::Whole()) {
    return LoadStacked({{name, shape, slice}});
  }

  // Biases (elements [begin, end)): f32 whatever the checkpoint, as Linear
  // adds them in f32.
  absl::StatusOr<std::unique_ptr<Buffer>> LoadF32(const std::string& name,
                                                  const std::vector<int64_t>& shape,
                                                  const WeightSlice& rows) {
    auto host = SliceRowsF32(store_, name, shape, rows.begin, rows.end);
    if (!host.ok()) return host.status();
    return ToBackend(*host);
  }

  // Rows of several [rows_i, cols] slices stacked into one matrix, in the
  // first part's dtype when none is forced (parts of one layer share it).
  absl::StatusOr<std::unique_ptr<Buffer>> LoadStacked(const std::vector<Part>& parts) {
    std::vector<HostWeight> views;
    size_t elements = 0;
    for (const Part& part : parts) {
      auto view = ReadWeightSlice(store_, part.name, part.shape, part.slice);
      if (!view.ok()) return view.status();
      elements += view->nbytes / DTypeSize(view->dtype);
      views.push_back(*std::move(view));
    }
    const DType target = dtype_.value_or(views.front().dtype);
    auto buffer = backend_->Allocate(target, elements);
    char* dst = static_cast<char*>(buffer->raw());
    std::vector<float> widened;
    for (const HostWeight& view : views) {
      const size_t n = view.nbytes / DTypeSize(view.dtype);
      if (view.dtype == target) {
        backend_->UploadBytes(view.data, dst, view.nbytes);
      } else {
        widened.resize(n);
        ConvertToFloat(view.dtype, view.data, n, widened.data());
        std::vector<char> converted(n * DTypeSize(target));
        ConvertFromFloat(target, widened.data(), n, converted.data());
        backend_->UploadBytes(converted.data(), dst, converted.size());
      }
      dst += n * DTypeSize(target);
      // Copied: the mapped pages need not stay resident (see tensor_slice.h).
      if (view.owned.empty()) ReleaseMappedPages(view.data, view.nbytes);
    }
    return buffer;
  }

  // Several biases (each this rank's elements) one after another, in f32.
  absl::StatusOr<std::unique_ptr<Buffer>> LoadF32Stacked(const std::vector<Part>& parts) {
    std::vector<float> stacked;
    for (const Part& part : parts) {
      auto host = SliceRowsF32(store_, part.name, part.shape, part.slice.begin, part.slice.end);
      if (!host.ok()) return host.status();
      stacked.insert(stacked.end(), host->begin(), host->end());
    }
    return ToBackend(stacked);
  }

  std::unique_ptr<Buffer> ToBackend(const std::vector<float>& host) {
    return UploadF32(backend_, host);
  }

 private:
  const WeightStore& store_;
  Backend* backend_;
  std::optional<DType> dtype_;
};

// Shapes of one layer's checkpoint tensors (the whole model's) and this
// rank's slices of them.
struct LayerGeometry {
  int64_t hidden;
  int64_t intermediate;
  int64_t q_dim;
  int64_t kv_dim;
  LayerSlices slices;
  bool attention_bias;
};

}  // namespace

struct LlamaModel::LayerWeights {
  std::unique_ptr<Buffer> input_norm, post_attention_norm;
  // [q_dim + 2 * kv_dim, hidden]: query rows, then key rows, then value rows
  // (vLLM's QKVParallelLinear), so one product serves all three.
  std::unique_ptr<Buffer> qkv_proj;
  std::unique_ptr<Buffer> qkv_bias;  // f32, the same order; null without attention_bias.
  std::unique_ptr<Buffer> o_proj;
  std::unique_ptr<Buffer> gate_up_proj;  // [2 * intermediate, hidden]: gate rows, then up rows.
  std::unique_ptr<Buffer> down_proj;

  // Layer `index`'s tensors (this rank's slices) in backend memory.
  static absl::StatusOr<std::unique_ptr<LayerWeights>> Load(WeightLoader& loader, int index,
                                                            const LayerGeometry& geometry);
};

absl::StatusOr<std::unique_ptr<LlamaModel::LayerWeights>> LlamaModel::LayerWeights::Load(
    WeightLoader& loader, int index, const LayerGeometry& geometry) {
  const std::string prefix = absl::StrCat("model.layers.", index, ".");
  const int64_t hidden = geometry.hidden;
  const int64_t inter = geometry.intermediate;
  const int64_t q_dim = geometry.q_dim;
  const int64_t kv_dim = geometry.kv_dim;
  const LayerSlices& slices = geometry.slices;
  auto layer = std::make_unique<LayerWeights>();
  PAGODA_ASSIGN_OR_RETURN(layer->input_norm,
                          loader.Load(prefix + "input_layernorm.weight", {hidden}));
  PAGODA_ASSIGN_OR_RETURN(layer->post_attention_norm,
                          loader.Load(prefix + "post_attention_layernorm.weight", {hidden}));
  PAGODA_ASSIGN_OR_RETURN(
      layer->qkv_proj,
      loader.LoadStacked({{prefix + "self_attn.q_proj.weight", {q_dim, hidden}, slices.q},
                          {prefix + "self_attn.k_proj.weight", {kv_dim, hidden}, slices.kv},
                          {prefix + "self_attn.v_proj.weight", {kv_dim, hidden}, slices.kv}}));
  PAGODA_ASSIGN_OR_RETURN(
      layer->o_proj, loader.Load(prefix + "self_attn.o_proj.weight", {hidden, q_dim}, slices.o));
  if (geometry.attention_bias) {
    PAGODA_ASSIGN_OR_RETURN(
        layer->qkv_bias,
        loader.LoadF32Stacked({{prefix + "self_attn.q_proj.bias", {q_dim}, slices.q},
                               {prefix + "self_attn.k_proj.bias", {kv_dim}, slices.kv},
                               {prefix + "self_attn.v_proj.bias", {kv_dim}, slices.kv}}));
  }
  PAGODA_ASSIGN_OR_RETURN(
      layer->gate_up_proj,
      loader.LoadStacked({{prefix + "mlp.gate_proj.weight", {inter, hidden}, slices.gate_up},
                          {prefix + "mlp.up_proj.weight", {inter, hidden}, slices.gate_up}}));
  PAGODA_ASSIGN_OR_RETURN(
      layer->down_proj, loader.Load(prefix + "mlp.down_proj.weight", {hidden, inter}, slices.down));
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
  if (config->head_dim <= 0) config->head_dim = HeadDim(*config);
  if (config->num_key_value_heads <= 0) config->num_key_value_heads = KvHeads(*config);
  if (config->head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, ": head_dim ", config->head_dim, " must be even for rotary"));
  }
  auto shard = PlanTensorParallelShard(*config, communicator->rank(), communicator->world_size());
  if (!shard.ok()) return shard.status();
  std::unique_ptr<LlamaModel> model(
      new LlamaModel(RankLocalConfig(*config, *shard), backend, communicator));
  if (absl::Status status = model->LoadWeights(model_dir, options.weight_dtype, *config, *shard);
      !status.ok()) {
    return status;
  }
  model->BuildRopeTable();
  const int max_seqs = std::max(1, options.max_num_seqs);
  // Block tables are reserved for contexts up to the rope table's bound, so a
  // config claiming a huge context does not reserve memory no request uses
  // (a longer step grows the workspace once).
  const int64_t max_context =
      std::clamp(model->config().max_position_embeddings, 1, kMaxRopeTablePositions);
  const int64_t block_size = std::max(1, options.block_size);
  model->row_logits_capacity_ = max_seqs;
  model->ReserveWorkspace(StepBatchCapacity{
      .tokens = std::max(1, options.max_num_batched_tokens),
      .seqs = max_seqs,
      .blocks_per_seq = static_cast<int>((max_context + block_size - 1) / block_size),
      .logits_rows = max_seqs});
  return model;
}

absl::Status LlamaModel::LoadWeights(const std::string& model_dir,
                                     std::optional<DType> weight_dtype,
                                     const ModelConfig& full_config,
                                     const TensorParallelShard& shard) {
  auto store = WeightStore::Open(model_dir);
  if (!store.ok()) return store.status();
  WeightLoader loader(**store, backend_, weight_dtype);
  // Checkpoint shapes are the whole model's; `slices` cut this rank's part.
  const int64_t hidden = full_config.hidden_size;
  const int64_t vocab = full_config.vocab_size;
  const LayerGeometry geometry{
      .hidden = hidden,
      .intermediate = full_config.intermediate_size,
      .q_dim = static_cast<int64_t>(full_config.num_attention_heads) * full_config.head_dim,
      .kv_dim = static_cast<int64_t>(full_config.num_key_value_heads) * full_config.head_dim,
      .slices = PlanLayerSlices(full_config, shard),
      .attention_bias = config_.attention_bias};
  const bool samples = shard.rank == 0;  // Only rank 0 computes logits.

  PAGODA_ASSIGN_OR_RETURN(embed_tokens_, loader.Load("model.embed_tokens.weight", {vocab, hidden}));
  PAGODA_ASSIGN_OR_RETURN(final_norm_, loader.Load("model.norm.weight", {hidden}));
  if (samples && ((*store)->Has("lm_head.weight") || !config_.tie_word_embeddings)) {
    PAGODA_ASSIGN_OR_RETURN(lm_head_, loader.Load("lm_head.weight", {vocab, hidden}));
  }
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    std::unique_ptr<LayerWeights> layer;
    PAGODA_ASSIGN_OR_RETURN(layer, LayerWeights::Load(loader, i, geometry));
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
  const size_t activations = t * (3 * hidden + 2 * q_dim + 2 * kv_dim + 3 * inter) + rows * hidden;
  const size_t bytes = activations * DTypeSize(backend_->activation_dtype()) +
                       rows * config_.vocab_size * sizeof(float) +
                       StepBatchUploader::RegionBytes(capacity);
  workspace_.Reserve(bytes, /*regions=*/12);
  uploader_.Reserve(capacity);
}

size_t LlamaModel::weight_bytes() const {
  auto bytes = [](const std::unique_ptr<Buffer>& b) -> size_t { return b ? b->nbytes() : 0; };
  size_t total = bytes(embed_tokens_) + bytes(final_norm_) + bytes(lm_head_);
  for (const auto& layer : layers_) {
    for (const auto* b :
         {&layer->input_norm, &layer->post_attention_norm, &layer->qkv_proj, &layer->qkv_bias,
          &layer->o_proj, &layer->gate_up_proj, &layer->down_proj}) {
      total += bytes(*b);
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

// One step's activations, each [tokens, width] in the activation dtype.
struct LlamaModel::Activations {
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

absl::StatusOr<ForwardOutput> LlamaModel::Forward(const FlatBatch& batch, CacheEngine* cache) {
  StepBatchCapacity capacity = StepBatchUploader::CapacityOf(batch);
  const int row_logits = batch.wants_prompt_logprobs() ? row_logits_capacity_ : 0;
  capacity.logits_rows = std::max(capacity.logits_rows, row_logits);
  ReserveWorkspace(capacity);  // Allocates only past the load-time sizing.
  workspace_.Reset();
  const StepBatch step = uploader_.Upload(batch, &workspace_);
  const Activations activations = TakeActivations(static_cast<size_t>(step.num_tokens));
  const float eps = static_cast<float>(config_.rms_norm_eps);

  backend_->Embedding(step, Matrix(embed_tokens_, config_.vocab_size, config_.hidden_size),
                      activations.residual);
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    const LayerWeights& layer = *layers_[i];
    // Pre-norm residual stream: the previous layer's MLP output is added to
    // the residual in the same pass that normalises it.
    if (i == 0) {
      backend_->RmsNorm(activations.residual, Vector(layer.input_norm), step.num_tokens, eps,
                        activations.normed);
    } else {
      backend_->AddRmsNorm(activations.residual, activations.projected, Vector(layer.input_norm),
                           step.num_tokens, eps, activations.normed);
    }
    if (absl::Status s = AttentionBlock(layer, cache->layer(i), step, activations); !s.ok()) {
      return s;
    }
    if (absl::Status s = MlpBlock(layer, step.num_tokens, activations); !s.ok()) return s;
  }
  return Logits(step, activations, row_logits);
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
  const int hidden = config_.hidden_size;
  const int heads = config_.num_attention_heads;
  const int head_dim = config_.head_dim;
  const int q_dim = heads * head_dim;
  const int kv_dim = config_.num_key_value_heads * head_dim;
  const DType act = backend_->activation_dtype();
  // One product for q, k and v (vLLM's QKVParallelLinear): on a GPU, three
  // would be two more GEMMs a layer, each with a split-K reduction at decode
  // batch sizes (docs/gpu.md). Rotary, the cache write and attention read
  // its rows through the stride.
  backend_->Linear(a.normed, tokens, Matrix(layer.qkv_proj, q_dim + 2 * kv_dim, hidden),
                   BiasOf(layer.qkv_bias), a.q, act);
  const RopeTable rope{.cos_sin = rope_cos_sin_->data(),
                       .inv_freq = inv_freq_->data(),
                       .max_positions = rope_positions_};
  backend_->Rope(a.q, a.k, a.qkv_stride, step, heads, config_.num_key_value_heads, head_dim, rope);
  backend_->WriteKvCache(a.k, a.v, a.qkv_stride, step, kv);
  backend_->PagedAttention(PagedAttentionParams{
      .query = a.q,
      .query_token_stride = a.qkv_stride,
      .output = a.attention,
      .cache = kv,
      .num_heads = heads,
      .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))),
      .batch = &step});
  backend_->Linear(a.attention, tokens, Matrix(layer.o_proj, hidden, q_dim), nullptr, a.projected,
                   act);
  // Row-parallel o_proj: each rank holds a partial sum over its heads.
  return AllReduceHidden(a.projected, tokens);
}

absl::Status LlamaModel::MlpBlock(const LayerWeights& layer, int tokens, const Activations& a) {
  const int hidden = config_.hidden_size;
  const int inter = config_.intermediate_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const DType act = backend_->activation_dtype();
  backend_->AddRmsNorm(a.residual, a.projected, Vector(layer.post_attention_norm), tokens, eps,
                       a.normed);
  backend_->Linear(a.normed, tokens, Matrix(layer.gate_up_proj, 2 * inter, hidden), nullptr,
                   a.gate_up, act);
  backend_->SiluAndMul(a.gate_up, tokens, inter, a.activated);
  backend_->Linear(a.activated, tokens, Matrix(layer.down_proj, hidden, inter), nullptr,
                   a.projected, act);
  // Row-parallel down_proj: partial sums over the intermediate slices.
  return AllReduceHidden(a.projected, tokens);
}

// Tensor-parallel sum of the activations, in their dtype; a failed
// collective ends the step with its status.
absl::Status LlamaModel::AllReduceHidden(void* data, int tokens) {
  return communicator_->AllReduceSum(data, static_cast<size_t>(tokens) * config_.hidden_size,
                                     backend_->activation_dtype());
}

ForwardOutput LlamaModel::Logits(const StepBatch& step, const Activations& a,
                                 int row_logits_capacity) {
  const int rows = step.num_logits_rows;
  const int hidden = config_.hidden_size;
  const int vocab = config_.vocab_size;
  ForwardOutput output;
  output.sampling = step.sampling;
  output.logits.dtype = DType::kF32;
  output.logits.rank = 2;
  output.logits.shape = {rows, vocab, 0, 0};
  if (communicator_->rank() != 0) {
    output.logits.shape[0] = 0;  // Only rank 0 computes logits and samples.
    return output;
  }
  if (rows == 0 && row_logits_capacity == 0) return output;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  if (config_.num_hidden_layers == 0) {
    backend_->RmsNorm(a.residual, Vector(final_norm_), step.num_tokens, eps, a.normed);
  } else {
    backend_->AddRmsNorm(a.residual, a.projected, Vector(final_norm_), step.num_tokens, eps,
                         a.normed);
  }
  const DType act = backend_->activation_dtype();
  const int logits_rows = std::max(rows, row_logits_capacity);
  void* last_hidden = workspace_.Take(act, static_cast<size_t>(logits_rows) * hidden);
  auto* logits =
      static_cast<float*>(workspace_.Take(DType::kF32, static_cast<size_t>(logits_rows) * vocab));
  if (row_logits_capacity > 0) {
    output.final_hidden = a.normed;
    output.row_logits = logits;
    output.row_logits_capacity = logits_rows;
  }
  if (rows == 0) return output;
  backend_->GatherRows(a.normed, step, hidden, last_hidden);
  RowLogits(last_hidden, rows, logits);
  output.logits.data = logits;
  return output;
}

void LlamaModel::RowLogits(const void* hidden, int rows, float* logits) {
  const auto& head = lm_head_ ? lm_head_ : embed_tokens_;
  backend_->Linear(hidden, rows, Matrix(head, config_.vocab_size, config_.hidden_size), nullptr,
                   logits, DType::kF32);
}

size_t LlamaModel::hidden_row_bytes() const {
  return static_cast<size_t>(config_.hidden_size) * DTypeSize(backend_->activation_dtype());
}

}  // namespace pagoda::worker
