#include "scheduler/startup/draft_model_files.h"

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/draft_model_positions.h"
#include "common/eagle3_head_config.h"
#include "common/eagle_head_positions.h"
#include "common/safetensors.h"
#include "common/tensor_parallel_plan.h"
#include "glog/logging.h"

namespace pagoda::scheduler {
namespace {

absl::Status DraftError(absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("--speculative-config: ", problem));
}

// An EAGLE-3 head's own settings against the target (common/
// eagle3_head_config.h, the rules the worker applies at load), and at a
// `draft_tensor_parallel_size` above 1 its lm_head over draft_vocab_size ids
// split over that many ranks as vLLM's ParallelLMHead pads and divides it.
absl::StatusOr<Eagle3HeadConfig> CheckEagle3HeadConfig(const std::string& dir,
                                                       const ModelConfig& head,
                                                       const ModelConfig& target,
                                                       int draft_tensor_parallel_size) {
  absl::StatusOr<Eagle3HeadConfig> eagle3 = LoadEagle3HeadConfig(dir, head, target);
  if (!eagle3.ok()) return DraftError(eagle3.status().message());
  if (draft_tensor_parallel_size > 1) {
    absl::Status split = CheckVocabParallelSplit(eagle3->draft_vocab, draft_tensor_parallel_size,
                                                 "draft_vocab_size");
    if (!split.ok()) return DraftError(absl::StrCat("EAGLE-3 head: ", split.message()));
  }
  return eagle3;
}

// An EAGLE-3 head's tensors over its draft vocabulary: lm_head.weight, when
// dense, of [draft_vocab_size, hidden] and d2t mapping every draft id into
// the target's vocabulary (ReadEagle3DraftToTarget: memory-mapped, 8 bytes
// a draft id).
absl::Status CheckEagle3DraftVocabTensors(const WeightStore& store, const Eagle3HeadConfig& eagle3,
                                          const ModelConfig& target) {
  if (store.Has("lm_head.weight")) {
    absl::StatusOr<TensorView> lm_head = store.Get("lm_head.weight");
    if (!lm_head.ok()) return DraftError(lm_head.status().message());
    const std::vector<int64_t> expected = {eagle3.draft_vocab, target.hidden_size};
    if (lm_head->shape != expected) {
      return DraftError(absl::StrCat("the EAGLE-3 head's lm_head.weight is ",
                                     ShapeString(lm_head->shape), ", expected ",
                                     ShapeString(expected), " ([draft_vocab_size, hidden_size])"));
    }
  }
  absl::StatusOr<std::vector<int32_t>> d2t =
      ReadEagle3DraftToTarget(store, eagle3.draft_vocab, target.vocab_size);
  if (!d2t.ok()) return DraftError(d2t.status().message());
  return absl::OkStatus();
}

// vLLM's max_model_len key (SpeculativeConfig._maybe_override_draft_max_model_len):
// at most the proposer's own positions and the target's --max-model-len, and
// then the proposer's max_model_len.
absl::Status SetGivenDraftMaxLen(absl::string_view proposer, int positions, int max_model_len,
                                 SpeculativeConfig* speculative) {
  const int given = *speculative->max_model_len;
  if (given > max_model_len) {
    return DraftError(
        absl::StrCat("max_model_len ", given, " is above --max-model-len ", max_model_len));
  }
  if (given > positions) {
    return DraftError(absl::StrCat("max_model_len ", given, " is above the ", proposer,
                                   "'s max_position_embeddings ", positions));
  }
  speculative->draft_max_len = given;
  LOG(INFO) << "--speculative-config: sequences draft only while their proposals stay below "
               "position "
            << given << " (max_model_len)";
  return absl::OkStatus();
}

// An EAGLE head (vLLM's EAGLE-1/2 layout): a Llama config of the target's
// hidden and vocabulary sizes (any max_position_embeddings: raised to
// `max_model_len` when below it), and an fc over concat(embedding, hidden);
// with `eagle3`, an EAGLE-3 head: the same config sizes, its own settings
// and draft vocabulary (above), and an fc over three target layers' hidden
// states (none without aux hidden states); at a `draft_tensor_parallel_size`
// above 1, its decoder layer must split over that many ranks. The worker
// checks every other tensor as it loads them.
absl::Status CheckEagleHeadFiles(const std::string& dir, const ModelConfig& target,
                                 int max_model_len, bool eagle3, int draft_tensor_parallel_size) {
  absl::StatusOr<ModelConfig> head = LoadModelConfig(dir);
  if (!head.ok()) return DraftError(absl::StrCat("EAGLE head: ", head.status().message()));
  for (const auto& [name, value, expected] :
       {std::tuple{"hidden_size", head->hidden_size, target.hidden_size},
        std::tuple{"vocab_size", head->vocab_size, target.vocab_size}}) {
    if (value != expected) {
      return DraftError(absl::StrCat("the EAGLE head's ", name, " ", value,
                                     " differs from the target's ", expected));
    }
  }
  // vLLM raises a head's positions to the target's instead of refusing it
  // (common/eagle_head_positions.h); the worker sizes its rotary table so.
  const int own_positions = head->max_position_embeddings;
  if (RaiseEagleHeadPositions(max_model_len, &*head)) {
    LOG(INFO) << "--speculative-config: the EAGLE head's max_position_embeddings " << own_positions
              << " raised to --max-model-len " << max_model_len
              << " (the head drafts at the target's positions, as vLLM's does)";
  }
  if (draft_tensor_parallel_size > 1) {
    absl::Status split = CheckTensorParallelSplit(*head, draft_tensor_parallel_size);
    if (!split.ok()) return DraftError(absl::StrCat("EAGLE head: ", split.message()));
  }
  std::optional<Eagle3HeadConfig> eagle3_config;
  if (eagle3) {
    absl::StatusOr<Eagle3HeadConfig> checked =
        CheckEagle3HeadConfig(dir, *head, target, draft_tensor_parallel_size);
    if (!checked.ok()) return checked.status();
    eagle3_config = *std::move(checked);
  }
  absl::StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir);
  if (!store.ok()) return DraftError(absl::StrCat("EAGLE head: ", store.status().message()));
  if (eagle3_config.has_value()) {
    if (absl::Status s = CheckEagle3DraftVocabTensors(**store, *eagle3_config, target); !s.ok()) {
      return s;
    }
    if (!eagle3_config->use_aux_hidden_state) return absl::OkStatus();  // vLLM builds no fc.
  }
  absl::StatusOr<TensorView> fc = (*store)->Get("fc.weight");
  if (!fc.ok()) {
    return DraftError(eagle3 ? "the EAGLE head has no fc.weight (an EAGLE-3 head: fc.weight, "
                               "midlayer.*, norm.weight, lm_head.weight, optionally d2t)"
                             : "the EAGLE head has no fc.weight (an EAGLE-1/2 head: fc.weight, "
                               "layers.0.*)");
  }
  const std::vector<int64_t> expected = {target.hidden_size,
                                         (eagle3 ? 3 : 2) * int64_t{target.hidden_size}};
  if (fc->shape != expected) {
    return DraftError(absl::StrCat("the EAGLE head's fc.weight is ", ShapeString(fc->shape),
                                   ", expected ", ShapeString(expected)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDraftModelFiles(SpeculativeConfig* speculative, const ModelConfig& target,
                                  int max_model_len, const Tokenizer* target_tokenizer,
                                  int draft_tensor_parallel_size) {
  if (speculative->method == SpeculativeMethod::kEagle ||
      speculative->method == SpeculativeMethod::kEagle3) {
    absl::Status head = CheckEagleHeadFiles(speculative->model, target, max_model_len,
                                            speculative->method == SpeculativeMethod::kEagle3,
                                            draft_tensor_parallel_size);
    if (!head.ok() || !speculative->max_model_len.has_value()) return head;
    // A head's positions are raised to --max-model-len's: the key may name
    // any length up to it.
    return SetGivenDraftMaxLen("EAGLE head", max_model_len, max_model_len, speculative);
  }
  if (speculative->method != SpeculativeMethod::kDraftModel) return absl::OkStatus();
  absl::StatusOr<ModelConfig> draft = LoadModelConfig(speculative->model);
  if (!draft.ok()) return DraftError(absl::StrCat("draft model: ", draft.status().message()));
  if (draft->vocab_size != target.vocab_size) {
    return DraftError(absl::StrCat("the draft model's vocab_size ", draft->vocab_size,
                                   " differs from the target's ", target.vocab_size));
  }
  // vLLM starts a draft of fewer positions and drafts only below them
  // (common/draft_model_positions.h); the engine's rows past them verify none.
  speculative->draft_max_len = DraftModelMaxLen(draft->max_position_embeddings, max_model_len);
  if (speculative->max_model_len.has_value()) {
    absl::Status given = SetGivenDraftMaxLen("draft model", draft->max_position_embeddings,
                                             max_model_len, speculative);
    if (!given.ok()) return given;
  } else if (*speculative->draft_max_len < max_model_len) {
    LOG(INFO) << "--speculative-config: the draft model's max_position_embeddings "
              << draft->max_position_embeddings << " is below --max-model-len " << max_model_len
              << ": sequences draft only while their proposals stay below position "
              << *speculative->draft_max_len << ", as vLLM's";
  }
  if (draft_tensor_parallel_size > 1) {
    absl::Status split = CheckTensorParallelSplit(*draft, draft_tensor_parallel_size);
    if (!split.ok()) return DraftError(absl::StrCat("draft model: ", split.message()));
  }
  if (target_tokenizer == nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(speculative->model);
  if (!tokenizer.ok()) {
    return DraftError(absl::StrCat("draft model: ", tokenizer.status().message()));
  }
  if (*tokenizer != nullptr && (*tokenizer)->vocab_size() != target_tokenizer->vocab_size()) {
    return DraftError(absl::StrCat("the draft model's tokenizer has ", (*tokenizer)->vocab_size(),
                                   " tokens, the target's ", target_tokenizer->vocab_size()));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::scheduler
