#include "worker/llama_model.h"

#include <cmath>
#include <numbers>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/safetensors.h"

namespace pagoda::worker {

struct LlamaModel::LayerWeights {
  std::unique_ptr<Buffer> input_norm, post_attention_norm;
  std::unique_ptr<Buffer> q_proj, k_proj, v_proj, o_proj;
  std::unique_ptr<Buffer> q_bias, k_bias, v_bias;  // Null without attention_bias.
  std::unique_ptr<Buffer> gate_up_proj;  // [2 * intermediate, hidden]: gate rows, then up rows.
  std::unique_ptr<Buffer> down_proj;
};

namespace {

int HeadDim(const ModelConfig& config) {
  return config.head_dim > 0 ? config.head_dim : config.hidden_size / config.num_attention_heads;
}

int KvHeads(const ModelConfig& config) {
  return config.num_key_value_heads > 0 ? config.num_key_value_heads : config.num_attention_heads;
}

// Loads weight tensors into backend memory, one call per tensor.
class WeightLoader {
 public:
  WeightLoader(const WeightStore& store, Backend* backend) : store_(store), backend_(backend) {}

  absl::StatusOr<std::unique_ptr<Buffer>> Load(const std::string& name,
                                               const std::vector<int64_t>& shape) {
    auto host = store_.GetF32(name, shape);
    if (!host.ok()) return host.status();
    return ToBackend(*host);
  }

  // Rows of several [rows_i, cols] tensors stacked into one matrix.
  absl::StatusOr<std::unique_ptr<Buffer>> LoadStacked(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
    std::vector<float> stacked;
    for (const auto& [name, shape] : parts) {
      auto host = store_.GetF32(name, shape);
      if (!host.ok()) return host.status();
      stacked.insert(stacked.end(), host->begin(), host->end());
    }
    return ToBackend(stacked);
  }

  std::unique_ptr<Buffer> ToBackend(const std::vector<float>& host) {
    auto buffer = backend_->Allocate(host.size());
    backend_->Upload(host.data(), buffer->data(), host.size());
    return buffer;
  }

 private:
  const WeightStore& store_;
  Backend* backend_;
};

}  // namespace

std::vector<double> RopeInverseFrequencies(const ModelConfig& config) {
  const int head_dim = HeadDim(config);
  std::vector<double> inv_freq(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = 1.0 / std::pow(config.rope_theta, 2.0 * i / head_dim);
  }
  const RopeScaling& scaling = config.rope_scaling;
  if (scaling.type == RopeScaling::Type::kLinear) {
    // Linear scaling divides positions by the factor; dividing the
    // frequencies is the same.
    for (double& f : inv_freq) f /= scaling.factor;
  } else if (scaling.type == RopeScaling::Type::kLlama3) {
    const double old_context = scaling.original_max_position_embeddings;
    const double low_freq_wavelen = old_context / scaling.low_freq_factor;
    const double high_freq_wavelen = old_context / scaling.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;  // High frequencies kept.
      if (wavelen > low_freq_wavelen) {
        f /= scaling.factor;  // Low frequencies scaled fully.
      } else {
        // In between, interpolate smoothly between scaled and unscaled.
        const double smooth = (old_context / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0 - smooth) * f / scaling.factor + smooth * f;
      }
    }
  }
  return inv_freq;
}

LlamaModel::LlamaModel(ModelConfig config, Backend* backend, Communicator* communicator)
    : config_(std::move(config)), backend_(backend), communicator_(communicator) {}

LlamaModel::~LlamaModel() = default;

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(const std::string& model_dir,
                                                             Backend* backend,
                                                             Communicator* communicator) {
  if (communicator->world_size() != 1) {
    return absl::UnimplementedError(absl::StrCat("tensor parallelism (world size ",
                                                 communicator->world_size(),
                                                 ") is not supported by the CPU model yet"));
  }
  auto config = LoadModelConfig(model_dir);
  if (!config.ok()) return config.status();
  if (config->head_dim <= 0) config->head_dim = HeadDim(*config);
  if (config->num_key_value_heads <= 0) config->num_key_value_heads = KvHeads(*config);
  if (config->head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, ": head_dim ", config->head_dim, " must be even for rotary"));
  }
  std::unique_ptr<LlamaModel> model(new LlamaModel(*std::move(config), backend, communicator));
  if (absl::Status status = model->LoadWeights(model_dir); !status.ok()) return status;
  return model;
}

absl::Status LlamaModel::LoadWeights(const std::string& model_dir) {
  auto store = WeightStore::Open(model_dir);
  if (!store.ok()) return store.status();
  WeightLoader loader(**store, backend_);
  const int64_t hidden = config_.hidden_size;
  const int64_t vocab = config_.vocab_size;
  const int64_t inter = config_.intermediate_size;
  const int64_t q_dim = static_cast<int64_t>(config_.num_attention_heads) * config_.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(config_.num_key_value_heads) * config_.head_dim;

#define PAGODA_ASSIGN_OR_RETURN(lhs, expr)    \
  {                                           \
    auto result = (expr);                     \
    if (!result.ok()) return result.status(); \
    lhs = *std::move(result);                 \
  }
  PAGODA_ASSIGN_OR_RETURN(embed_tokens_, loader.Load("model.embed_tokens.weight", {vocab, hidden}));
  PAGODA_ASSIGN_OR_RETURN(final_norm_, loader.Load("model.norm.weight", {hidden}));
  if ((*store)->Has("lm_head.weight") || !config_.tie_word_embeddings) {
    PAGODA_ASSIGN_OR_RETURN(lm_head_, loader.Load("lm_head.weight", {vocab, hidden}));
  }
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    const std::string prefix = absl::StrCat("model.layers.", i, ".");
    auto layer = std::make_unique<LayerWeights>();
    PAGODA_ASSIGN_OR_RETURN(layer->input_norm,
                            loader.Load(prefix + "input_layernorm.weight", {hidden}));
    PAGODA_ASSIGN_OR_RETURN(layer->post_attention_norm,
                            loader.Load(prefix + "post_attention_layernorm.weight", {hidden}));
    PAGODA_ASSIGN_OR_RETURN(layer->q_proj,
                            loader.Load(prefix + "self_attn.q_proj.weight", {q_dim, hidden}));
    PAGODA_ASSIGN_OR_RETURN(layer->k_proj,
                            loader.Load(prefix + "self_attn.k_proj.weight", {kv_dim, hidden}));
    PAGODA_ASSIGN_OR_RETURN(layer->v_proj,
                            loader.Load(prefix + "self_attn.v_proj.weight", {kv_dim, hidden}));
    PAGODA_ASSIGN_OR_RETURN(layer->o_proj,
                            loader.Load(prefix + "self_attn.o_proj.weight", {hidden, q_dim}));
    if (config_.attention_bias) {
      PAGODA_ASSIGN_OR_RETURN(layer->q_bias,
                              loader.Load(prefix + "self_attn.q_proj.bias", {q_dim}));
      PAGODA_ASSIGN_OR_RETURN(layer->k_bias,
                              loader.Load(prefix + "self_attn.k_proj.bias", {kv_dim}));
      PAGODA_ASSIGN_OR_RETURN(layer->v_bias,
                              loader.Load(prefix + "self_attn.v_proj.bias", {kv_dim}));
    }
    PAGODA_ASSIGN_OR_RETURN(layer->gate_up_proj,
                            loader.LoadStacked({{prefix + "mlp.gate_proj.weight", {inter, hidden}},
                                                {prefix + "mlp.up_proj.weight", {inter, hidden}}}));
    PAGODA_ASSIGN_OR_RETURN(layer->down_proj,
                            loader.Load(prefix + "mlp.down_proj.weight", {hidden, inter}));
    layers_.push_back(std::move(layer));
  }
#undef PAGODA_ASSIGN_OR_RETURN

  std::vector<double> inv_freq = RopeInverseFrequencies(config_);
  inv_freq_ = loader.ToBackend(std::vector<float>(inv_freq.begin(), inv_freq.end()));
  return absl::OkStatus();
}

KvCacheShape LlamaModel::CacheShape(int block_size) const {
  return KvCacheShape{.num_layers = config_.num_hidden_layers,
                      .num_kv_heads = config_.num_key_value_heads,
                      .block_size = block_size,
                      .head_dim = config_.head_dim};
}

absl::StatusOr<std::vector<float>> LlamaModel::Forward(const FlatBatch& batch, CacheEngine* cache) {
  const int tokens = batch.num_tokens();
  const int hidden = config_.hidden_size;
  const int heads = config_.num_attention_heads;
  const int kv_heads = config_.num_key_value_heads;
  const int head_dim = config_.head_dim;
  const int inter = config_.intermediate_size;
  const int q_dim = heads * head_dim;
  const int kv_dim = kv_heads * head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int block_size = cache->shape().block_size;

  auto residual = backend_->Allocate(static_cast<size_t>(tokens) * hidden);
  auto normed = backend_->Allocate(static_cast<size_t>(tokens) * hidden);
  auto q = backend_->Allocate(static_cast<size_t>(tokens) * q_dim);
  auto k = backend_->Allocate(static_cast<size_t>(tokens) * kv_dim);
  auto v = backend_->Allocate(static_cast<size_t>(tokens) * kv_dim);
  auto attention = backend_->Allocate(static_cast<size_t>(tokens) * q_dim);
  auto projected = backend_->Allocate(static_cast<size_t>(tokens) * hidden);
  auto gate_up = backend_->Allocate(static_cast<size_t>(tokens) * 2 * inter);
  auto activated = backend_->Allocate(static_cast<size_t>(tokens) * inter);

  backend_->Embedding(batch.input_ids, embed_tokens_->data(), hidden, residual->data());
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    LayerWeights& layer = *layers_[i];
    // Pre-norm residual stream: the previous layer's MLP output is added to
    // the residual in the same pass that normalises it.
    if (i == 0) {
      backend_->RmsNorm(residual->data(), layer.input_norm->data(), tokens, hidden, eps,
                        normed->data());
    } else {
      backend_->AddRmsNorm(residual->data(), projected->data(), layer.input_norm->data(), tokens,
                           hidden, eps, normed->data());
    }
    auto bias = [](const std::unique_ptr<Buffer>& b) { return b ? b->data() : nullptr; };
    backend_->Linear(normed->data(), tokens, hidden, layer.q_proj->data(), bias(layer.q_bias),
                     q_dim, q->data());
    backend_->Linear(normed->data(), tokens, hidden, layer.k_proj->data(), bias(layer.k_bias),
                     kv_dim, k->data());
    backend_->Linear(normed->data(), tokens, hidden, layer.v_proj->data(), bias(layer.v_bias),
                     kv_dim, v->data());
    backend_->Rope(q->data(), k->data(), batch.positions, heads, kv_heads, head_dim,
                   inv_freq_->data());
    backend_->WriteKvCache(k->data(), v->data(), batch.slot_mapping, kv_heads, head_dim, block_size,
                           cache->key_cache(i), cache->value_cache(i));
    PagedAttentionParams params;
    params.query = q->data();
    params.output = attention->data();
    params.key_cache = cache->key_cache(i);
    params.value_cache = cache->value_cache(i);
    params.num_heads = heads;
    params.num_kv_heads = kv_heads;
    params.head_dim = head_dim;
    params.block_size = block_size;
    params.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
    params.query_start = batch.query_start;
    params.context_lens = batch.context_lens;
    params.block_tables = batch.block_tables;
    params.max_blocks_per_seq = batch.max_blocks_per_seq;
    backend_->PagedAttention(params);
    backend_->Linear(attention->data(), tokens, q_dim, layer.o_proj->data(), nullptr, hidden,
                     projected->data());
    communicator_->AllReduceSum(projected->data(), static_cast<size_t>(tokens) * hidden);

    backend_->AddRmsNorm(residual->data(), projected->data(), layer.post_attention_norm->data(),
                         tokens, hidden, eps, normed->data());
    backend_->Linear(normed->data(), tokens, hidden, layer.gate_up_proj->data(), nullptr, 2 * inter,
                     gate_up->data());
    backend_->SiluAndMul(gate_up->data(), tokens, inter, activated->data());
    backend_->Linear(activated->data(), tokens, inter, layer.down_proj->data(), nullptr, hidden,
                     projected->data());
    communicator_->AllReduceSum(projected->data(), static_cast<size_t>(tokens) * hidden);
  }

  const int rows = static_cast<int>(batch.logits_indices.size());
  std::vector<float> logits(static_cast<size_t>(rows) * config_.vocab_size);
  if (rows == 0) return logits;
  if (config_.num_hidden_layers == 0) {
    backend_->RmsNorm(residual->data(), final_norm_->data(), tokens, hidden, eps, normed->data());
  } else {
    backend_->AddRmsNorm(residual->data(), projected->data(), final_norm_->data(), tokens, hidden,
                         eps, normed->data());
  }
  auto last_hidden = backend_->Allocate(static_cast<size_t>(rows) * hidden);
  backend_->GatherRows(normed->data(), batch.logits_indices, hidden, last_hidden->data());
  auto device_logits = backend_->Allocate(logits.size());
  const float* head = lm_head_ ? lm_head_->data() : embed_tokens_->data();
  backend_->Linear(last_hidden->data(), rows, hidden, head, nullptr, config_.vocab_size,
                   device_logits->data());
  backend_->Download(device_logits->data(), logits.data(), logits.size());
  return logits;
}

}  // namespace pagoda::worker
