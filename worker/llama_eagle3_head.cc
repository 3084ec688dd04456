// LlamaModel as an EAGLE-3 head (speculative decoding's eagle3 method), as
// vLLM's Eagle3LlamaForCausalLM loads and runs it: an fc from three target
// layers' hidden states to one (none with use_aux_hidden_state false: the
// target's final-normed hidden state enters as it is), a first layer whose
// q/k/v read the normalised token embedding beside the normalised hidden
// state, then any further plain Llama layers, and the head's own final norm
// and lm_head over a draft vocabulary mapped to target ids by d2t; and the
// target's side of it, the aux layers' rows it keeps.
// docs/speculative-decoding.md.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/eagle3_head_config.h"
#include "common/eagle_head_positions.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/tensor_parallel_plan.h"
#include "worker/llama_eagle3_parts.h"
#include "worker/llama_model.h"
#include "worker/weight_loader.h"

namespace pagoda::worker {
namespace {

absl::Status Eagle3Error(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("EAGLE-3 head: ", status.message()));
}

}  // namespace

const std::vector<int>& LlamaModel::eagle3_aux_layers() const {
  static const std::vector<int> kNone;
  return eagle3_ != nullptr ? eagle3_->aux_layers : kNone;
}

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::LoadEagle3Head(
    const std::string& head_dir, Backend* backend, Communicator* communicator,
    const LlamaLoadOptions& options, const LlamaModel& target) {
  auto config = LoadModelConfig(head_dir);
  if (!config.ok()) return Eagle3Error(config.status());
  if (absl::Status s = CompleteConfig(head_dir, &*config); !s.ok()) return Eagle3Error(s);
  // Drafting at the target's positions, past the head's own when its
  // config.json says fewer (vLLM's; common/eagle_head_positions.h): the
  // rotary table covers every position the target serves.
  RaiseEagleHeadPositions(target.max_positions(), &*config);
  absl::StatusOr<Eagle3HeadConfig> keys = LoadEagle3HeadConfig(head_dir, *config, target.config());
  if (!keys.ok()) return keys.status();
  // Sharded over `communicator` as the target's layers are; whole on a
  // one-rank one.
  auto shard = PlanTensorParallelShard(*config, communicator->rank(), communicator->world_size());
  if (!shard.ok()) return Eagle3Error(shard.status());
  std::unique_ptr<LlamaModel> head(
      new LlamaModel(RankLocalConfig(*config, *shard), backend, communicator));
  head->eagle_target_ = &target;
  head->eagle3_ = std::make_unique<Eagle3HeadParts>();
  head->eagle3_->aux_layers = keys->aux_layers;
  head->eagle3_->draft_vocab = static_cast<int>(keys->draft_vocab);
  head->eagle3_->norm_before_residual = keys->norm_before_residual;
  head->whole_lm_head_on_rank0_ = options.whole_lm_head_on_rank0;
  if (absl::Status s = head->LoadEagle3Weights(head_dir, options.weight_dtype, *config, *shard);
      !s.ok()) {
    return absl::StartsWith(s.message(), "EAGLE-3 head: ") ? s : Eagle3Error(s);
  }
  head->BuildRopeTable();
  head->ReserveLoadTimeWorkspace(options);
  return head;
}

absl::Status LlamaModel::LoadEagle3Weights(const std::string& head_dir,
                                           std::optional<DType> weight_dtype,
                                           const ModelConfig& full_config,
                                           const TensorParallelShard& shard) {
  auto store = WeightStore::Open(head_dir);
  if (!store.ok()) return store.status();
  WeightLoader loader(**store, backend_, weight_dtype, quant_config_);
  const int64_t hidden = full_config.hidden_size;
  const int64_t vocab = full_config.vocab_size;
  const DType act = backend_->activation_dtype();
  // The fc is replicated on every rank of a sharded head (vLLM's
  // ReplicatedLinear): its input, the target's three hidden states, and its
  // output, the residual stream, are whole on every rank. A head without
  // aux hidden states has none (a checkpoint's own is ignored, as vLLM's).
  if (!eagle3_->aux_layers.empty()) {
    PAGODA_ASSIGN_OR_RETURN(
        fc_, loader.LoadLinear({{"fc", hidden, 3 * hidden, WeightSlice::Whole()}}, false, act));
  }
  // vLLM renames "midlayer." to its layer 0; a checkpoint may use either.
  const std::string prefix =
      (*store)->Has("layers.0.hidden_norm.weight") ? "layers.0." : "midlayer.";
  PAGODA_ASSIGN_OR_RETURN(eagle3_->hidden_norm,
                          loader.Load(prefix + "hidden_norm.weight", {hidden}));
  PAGODA_ASSIGN_OR_RETURN(final_norm_, loader.Load("norm.weight", {hidden}));
  // Split over the draft vocabulary on a sharded head (gathered to rank 0,
  // which maps it to target ids).
  PAGODA_ASSIGN_OR_RETURN(
      eagle3_->lm_head,
      VocabParallelHead::Load({.loader = &loader,
                               .whole_on_rank0 = whole_lm_head_on_rank0_,
                               .vocab_key = "draft_vocab_size"},
                              eagle3_->draft_vocab, hidden, backend_, communicator_));
  if ((*store)->Has("embed_tokens.weight")) {
    PAGODA_ASSIGN_OR_RETURN(embed_tokens_, loader.Load("embed_tokens.weight", {vocab, hidden}));
  }
  PAGODA_ASSIGN_OR_RETURN(eagle3_->draft_to_target,
                          ReadEagle3DraftToTarget(**store, eagle3_->draft_vocab, vocab));
  return LoadEagle3Layers(loader, prefix, full_config, shard);
}

// The target's side of an EAGLE-3 head (LlamaModel::KeepAuxHidden): the
// residual stream entering each aux layer, gathered on the device.
void LlamaModel::CaptureAuxHidden(int layer, int tokens, const void* residual) {
  if (aux_layers_.empty()) return;
  const size_t row_bytes = hidden_row_bytes();
  const size_t width = aux_layers_.size() * row_bytes;
  ReserveAuxHidden(tokens);
  for (size_t slot = 0; slot < aux_layers_.size(); ++slot) {
    if (aux_layers_[slot] != layer) continue;
    backend_->CopyRows(residual, row_bytes,
                       static_cast<char*>(aux_device_->raw()) + slot * row_bytes, width, row_bytes,
                       tokens);
  }
}

void LlamaModel::ReserveAuxHidden(int tokens) {
  const size_t bytes =
      static_cast<size_t>(std::max(1, tokens)) * aux_layers_.size() * hidden_row_bytes();
  if (aux_device_ != nullptr && aux_device_->nbytes() >= bytes) return;
  aux_device_.reset();  // Free before allocating the bigger one.
  aux_device_ = backend_->Allocate(DType::kF32, (bytes + sizeof(float) - 1) / sizeof(float));
  ++buffer_generation_;
}

void LlamaModel::KeepAuxHidden(std::vector<int> layers) {
  aux_layers_ = std::move(layers);
  ReserveAuxHidden(reserved_tokens_);
}

absl::StatusOr<ForwardOutput> LlamaModel::ForwardEagle3(const FlatBatch& batch, CacheEngine* cache,
                                                        const void* features,
                                                        bool features_from_target) {
  const StepBatch step = UploadStep(batch, /*row_logits=*/0);
  step_lora_slots_ = nullptr;  // A head serves no adapters.
  const size_t tokens = static_cast<size_t>(step.num_tokens);
  const Activations a = TakeActivations(tokens);
  const DType act = backend_->activation_dtype();
  const int64_t hidden = config_.hidden_size;
  const size_t row_bytes = hidden_row_bytes();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  void* fc_input = workspace_.Take(act, tokens * 3 * hidden);
  void* embeds_normed = workspace_.Take(act, tokens * hidden);
  void* hidden_normed = workspace_.Take(act, tokens * hidden);
  void* layer_input = workspace_.Take(act, tokens * 2 * hidden);
  const Buffer& embed = embed_tokens_ != nullptr ? *embed_tokens_ : *eagle_target_->embed_tokens_;
  backend_->Embedding(step, Tensor::Of(embed, {config_.vocab_size, hidden}), a.normed);
  // The hidden state enters as the residual (vLLM's norm after residual):
  // fc(aux rows), or, without aux rows, the target's final-normed row as
  // it is, as the head's own output is.
  if (features_from_target && fc_ != nullptr) {
    backend_->UploadBytes(features, fc_input, tokens * 3 * row_bytes);
    fc_->Forward(fc_input, step.num_tokens, a.residual);
  } else {
    backend_->UploadBytes(features, a.residual, tokens * row_bytes);
  }
  const LayerWeights& layer = *layers_[0];
  backend_->RmsNorm(a.normed, Tensor::Of(*eagle3_->input_norm, {hidden}), step.num_tokens, eps,
                    embeds_normed);
  backend_->RmsNorm(a.residual, Tensor::Of(*eagle3_->hidden_norm, {hidden}), step.num_tokens, eps,
                    hidden_normed);
  // concat(embeds, hidden) per row, each half copied into its columns on
  // the device.
  backend_->CopyRows(embeds_normed, row_bytes, layer_input, 2 * row_bytes, row_bytes,
                     step.num_tokens);
  backend_->CopyRows(hidden_normed, row_bytes, static_cast<char*>(layer_input) + row_bytes,
                     2 * row_bytes, row_bytes, step.num_tokens);
  if (eagle3_->norm_before_residual) {
    backend_->CopyRows(hidden_normed, row_bytes, a.residual, row_bytes, row_bytes, step.num_tokens);
  }
  Activations attention_input = a;
  attention_input.normed = layer_input;
  if (absl::Status s = AttentionBlock(layer, cache->layer(0), step, attention_input); !s.ok()) {
    return s;
  }
  if (absl::Status s = MlpBlock(layer, step.num_tokens, a); !s.ok()) return s;
  // Later layers (vLLM's layer_idx > 0): the pre-norm residual stream goes
  // on through plain Llama layers, without the embedding.
  if (absl::Status s = RunLayers(step, cache, a, /*first_layer=*/1); !s.ok()) return s;
  return Eagle3Logits(step, a);
}

absl::StatusOr<ForwardOutput> LlamaModel::Eagle3Logits(const StepBatch& step,
                                                       const Activations& a) {
  const int rows = step.num_logits_rows;
  const int64_t hidden = config_.hidden_size;
  const int vocab = config_.vocab_size;
  const int draft_vocab = eagle3_->draft_vocab;
  ForwardOutput output;
  output.sampling = step.sampling;
  output.logits.dtype = DType::kF32;
  output.logits.rank = 2;
  output.logits.shape = {rows, vocab, 0, 0};
  // a.residual becomes the pre-norm output (the next pass's hidden state),
  // a.normed its final-normed copy (the logits').
  backend_->AddRmsNorm(a.residual, a.projected, Tensor::Of(*final_norm_, {hidden}), step.num_tokens,
                       static_cast<float>(config_.rms_norm_eps), a.normed);
  if (rows == 0) return output;
  const DType act = backend_->activation_dtype();
  void* head_hidden = workspace_.Take(act, static_cast<size_t>(rows) * hidden);
  backend_->GatherRows(a.residual, step, hidden, head_hidden);
  output.head_hidden = head_hidden;  // Every rank's next pass reads it.
  // Every rank computes its rows of a split lm_head; only rank 0 samples.
  const bool samples = communicator_->rank() == 0;
  if (!samples && !eagle3_->lm_head->split()) {
    output.logits.shape[0] = 0;
    return output;
  }
  void* normed_rows = workspace_.Take(act, static_cast<size_t>(rows) * hidden);
  auto* draft_logits =
      static_cast<float*>(workspace_.Take(DType::kF32, static_cast<size_t>(rows) * draft_vocab));
  auto* logits =
      static_cast<float*>(workspace_.Take(DType::kF32, static_cast<size_t>(rows) * vocab));
  backend_->GatherRows(a.normed, step, hidden, normed_rows);
  if (absl::Status s = eagle3_->lm_head->Forward(normed_rows, rows, draft_logits); !s.ok()) {
    return s;
  }
  if (!samples) {
    output.logits.shape[0] = 0;
    return output;
  }
  // vLLM's compute_logits: draft id d's logit at target id d + d2t[d],
  // -inf at every target id the draft vocabulary lacks.
  std::vector<float>& host_draft = eagle3_->draft_logits;
  std::vector<float>& host = eagle3_->logits;
  host_draft.resize(static_cast<size_t>(rows) * draft_vocab);
  host.assign(static_cast<size_t>(rows) * vocab, -std::numeric_limits<float>::infinity());
  backend_->DownloadBytes(draft_logits, host_draft.data(), host_draft.size() * sizeof(float));
  for (int r = 0; r < rows; ++r) {
    for (int d = 0; d < draft_vocab; ++d) {
      host[static_cast<size_t>(r) * vocab + eagle3_->draft_to_target[d]] =
          host_draft[static_cast<size_t>(r) * draft_vocab + d];
    }
  }
  backend_->UploadBytes(host.data(), logits, host.size() * sizeof(float));
  output.logits.data = logits;
  return output;
}

}  // namespace pagoda::worker
