// LlamaModel as an EAGLE(-1/2) head (speculative decoding's eagle method):
// loading the head's checkpoint and its forward over the target's features.
// The decoder layers are LlamaModel's own (llama_model.cc); what differs is
// the input (an fc over the token's embedding and the target's hidden
// state), the first layer's missing input norm, and the output (no final
// norm, the target's lm_head). docs/speculative-decoding.md.

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/eagle_head_positions.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/tensor_parallel_plan.h"
#include "worker/llama_model.h"
#include "worker/weight_loader.h"

namespace pagoda::worker {
namespace {

absl::Status EagleHeadError(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("EAGLE head: ", status.message()));
}

absl::Status CheckHeadAgainstTarget(const ModelConfig& head, const ModelConfig& target) {
  if (head.hidden_size != target.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat("the EAGLE head's hidden_size ",
                                                   head.hidden_size, " differs from the target's ",
                                                   target.hidden_size));
  }
  if (head.vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("the EAGLE head's vocab_size ", head.vocab_size,
                                                   " differs from the target's ",
                                                   target.vocab_size));
  }
  if (head.num_hidden_layers < 1) {
    return absl::InvalidArgumentError("the EAGLE head has no decoder layer (num_hidden_layers 0)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::LoadEagleHead(
    const std::string& head_dir, Backend* backend, Communicator* communicator,
    const LlamaLoadOptions& options, const LlamaModel& target) {
  auto config = LoadModelConfig(head_dir);
  if (!config.ok()) return EagleHeadError(config.status());
  if (absl::Status s = CompleteConfig(head_dir, &*config); !s.ok()) return EagleHeadError(s);
  // Drafting at the target's positions, past the head's own when its
  // config.json says fewer (vLLM's; common/eagle_head_positions.h): the
  // rotary table covers every position the target serves.
  RaiseEagleHeadPositions(target.max_positions(), &*config);
  if (absl::Status s = CheckHeadAgainstTarget(*config, target.config()); !s.ok()) return s;
  // Sharded over `communicator` as the target's layers are (heads and MLP
  // split, all-reduces after o_proj and down_proj); whole on a one-rank one.
  auto shard = PlanTensorParallelShard(*config, communicator->rank(), communicator->world_size());
  if (!shard.ok()) return EagleHeadError(shard.status());
  std::unique_ptr<LlamaModel> head(
      new LlamaModel(RankLocalConfig(*config, *shard), backend, communicator));
  head->eagle_target_ = &target;
  if (absl::Status s = head->LoadEagleWeights(head_dir, options.weight_dtype, *config, *shard);
      !s.ok()) {
    return EagleHeadError(s);
  }
  if (communicator->world_size() == 1 && target.lm_head_->split()) {
    if (absl::Status s = head->LoadWholeTargetHead(options.weight_dtype); !s.ok()) {
      return EagleHeadError(s);
    }
  }
  head->BuildRopeTable();
  head->ReserveLoadTimeWorkspace(options);
  return head;
}

// A head whole on rank 0 (draft size 1) beside a target whose lm_head is
// split over its group: the head's logits need every vocabulary row, so it
// keeps the target's head whole (the embedding's rows when tied, which every
// rank holds whole).
absl::Status LlamaModel::LoadWholeTargetHead(std::optional<DType> weight_dtype) {
  const LlamaModel& target = *eagle_target_;
  auto store = WeightStore::Open(target.model_dir_);
  if (!store.ok()) return store.status();
  WeightLoader loader(**store, backend_, weight_dtype, target.quant_config_);
  const bool own_head = (*store)->Has("lm_head.weight") || !target.config_.tie_word_embeddings;
  PAGODA_ASSIGN_OR_RETURN(
      lm_head_,
      VocabParallelHead::Load(
          {.loader = &loader, .tied = own_head ? nullptr : target.embed_tokens_.get()},
          target.config_.vocab_size, target.config_.hidden_size, backend_, communicator_));
  return absl::OkStatus();
}

absl::Status LlamaModel::LoadEagleWeights(const std::string& head_dir,
                                          std::optional<DType> weight_dtype,
                                          const ModelConfig& full_config,
                                          const TensorParallelShard& shard) {
  auto store = WeightStore::Open(head_dir);
  if (!store.ok()) return store.status();
  WeightLoader loader(**store, backend_, weight_dtype, quant_config_);
  const int64_t hidden = full_config.hidden_size;
  // vLLM builds the fc without a bias; EAGLE's own training code has one:
  // the checkpoint says which. Replicated on every rank of a sharded head,
  // as vLLM's: its input (the token's embedding and the target's hidden
  // state) is whole on every rank, and its output is the residual stream,
  // which every rank holds whole.
  PAGODA_ASSIGN_OR_RETURN(
      fc_, loader.LoadLinear({{"fc", hidden, 2 * hidden, WeightSlice::Whole()}},
                             (*store)->Has("fc.bias"), backend_->activation_dtype()));
  // EagleLogits' all-ones norm weight, in the activation dtype as the
  // checkpoint's norms are (CUDA's norm kernels read their weight in it).
  const DType act = backend_->activation_dtype();
  const std::vector<float> ones(static_cast<size_t>(hidden), 1.0f);
  std::vector<char> encoded(ones.size() * DTypeSize(act));
  ConvertFromFloat(act, ones.data(), ones.size(), encoded.data());
  ones_ = backend_->Allocate(act, ones.size());
  backend_->UploadBytes(encoded.data(), ones_->raw(), encoded.size());
  return LoadLayers(loader, **store, "layers.", full_config, shard);
}

absl::StatusOr<ForwardOutput> LlamaModel::ForwardEagle(const FlatBatch& batch, CacheEngine* cache,
                                                       const void* features,
                                                       bool features_from_target) {
  if (is_eagle3_head()) return ForwardEagle3(batch, cache, features, features_from_target);
  const StepBatch step = UploadStep(batch, /*row_logits=*/0);
  step_lora_slots_ = nullptr;  // A head serves no adapters.
  const size_t tokens = static_cast<size_t>(step.num_tokens);
  const Activations a = TakeActivations(tokens);
  const DType act = backend_->activation_dtype();
  const size_t row_bytes = static_cast<size_t>(config_.hidden_size) * DTypeSize(act);
  void* fc_input = workspace_.Take(act, tokens * 2 * config_.hidden_size);
  const LlamaModel& target = *eagle_target_;
  backend_->Embedding(
      step,
      Tensor::Of(*target.embed_tokens_, {target.config_.vocab_size, target.config_.hidden_size}),
      a.normed);
  // concat(embedding, feature) per row, on the device: the features (host
  // rows) go up into a.projected, unused until the first layer, and each
  // half is copied into its columns, so nothing comes back to the host.
  backend_->UploadBytes(features, a.projected, tokens * row_bytes);
  backend_->CopyRows(a.normed, row_bytes, fc_input, 2 * row_bytes, row_bytes, step.num_tokens);
  backend_->CopyRows(a.projected, row_bytes, static_cast<char*>(fc_input) + row_bytes,
                     2 * row_bytes, row_bytes, step.num_tokens);
  fc_->Forward(fc_input, step.num_tokens, a.residual);
  if (absl::Status s = RunLayers(step, cache, a); !s.ok()) return s;
  return EagleLogits(step, a);
}

absl::StatusOr<ForwardOutput> LlamaModel::EagleLogits(const StepBatch& step, const Activations& a) {
  const int rows = step.num_logits_rows;
  const int hidden = config_.hidden_size;
  const int vocab = config_.vocab_size;
  ForwardOutput output;
  output.sampling = step.sampling;
  output.logits.dtype = DType::kF32;
  output.logits.rank = 2;
  output.logits.shape = {rows, vocab, 0, 0};
  // The head's output is the residual stream plus the last MLP's output,
  // with no final norm (vLLM's EAGLE model returns hidden_states +
  // residual). AddRmsNorm leaves that sum in a.residual; its normalised copy
  // (all-ones weight) is not used.
  backend_->AddRmsNorm(a.residual, a.projected, Tensor::Of(*ones_, {hidden}), step.num_tokens,
                       static_cast<float>(config_.rms_norm_eps), a.normed);
  if (rows == 0) return output;
  const DType act = backend_->activation_dtype();
  void* head_hidden = workspace_.Take(act, static_cast<size_t>(rows) * hidden);
  backend_->GatherRows(a.residual, step, hidden, head_hidden);
  output.head_hidden = head_hidden;  // Every rank's next pass reads it.
  // The target's lm_head, split over the group when the head is sharded
  // beside the target (every rank computes its rows); only rank 0 gets the
  // logits and samples (DraftModel::SharePicks tells the others).
  VocabParallelHead& lm_head = lm_head_ != nullptr ? *lm_head_ : *eagle_target_->lm_head_;
  const bool samples = communicator_->rank() == 0;
  auto* logits =
      samples ? static_cast<float*>(workspace_.Take(DType::kF32, static_cast<size_t>(rows) * vocab))
              : nullptr;
  if (absl::Status s = lm_head.Forward(head_hidden, rows, logits); !s.ok()) return s;
  if (!samples) output.logits.shape[0] = 0;
  output.logits.data = logits;
  return output;
}

}  // namespace pagoda::worker
