#include "worker/draft_model.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/draft_model_positions.h"
#include "common/speculation_limits.h"
#include "worker/draft_batch_builder.h"
#include "worker/last_sampled_tokens.h"
#include "worker/step_execution.h"

namespace pagoda::worker {
namespace {

using v1::SequenceStep;
using v1::StepPlan;

absl::Status ProposalError(const SequenceStep& step, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("seq_id ", step.seq_id(), ": ", problem));
}

// `plan` with each row's proposals as that many draft tokens 0, which the
// passes replace: the plan FlattenStepPlan checks and the target verifies.
StepPlan WithDraftRoom(const StepPlan& plan) {
  StepPlan verify = plan;
  for (SequenceStep& step : *verify.mutable_sequences()) {
    step.mutable_draft_token_ids()->Resize(step.num_draft_proposals(), 0);
    step.clear_num_draft_proposals();
  }
  return verify;
}

// Per plan row, the proposals it asks for this step.
std::vector<int> AskedOf(const StepPlan& plan) {
  std::vector<int> asked;
  asked.reserve(plan.sequences_size());
  for (const SequenceStep& step : plan.sequences()) asked.push_back(step.num_draft_proposals());
  return asked;
}

// A row's proposals for the next step (num_next_draft_proposals): the
// count, a row that samples, no proposals for this step beside them. Their
// room in the block table is CheckAheadRoom's.
absl::Status CheckNextProposalCount(const SequenceStep& step) {
  const int k = step.num_next_draft_proposals();
  if (k == 0) return absl::OkStatus();
  if (k < 0 || k > kMaxSpeculativeTokens) {
    return ProposalError(step, absl::StrCat("num_next_draft_proposals ", k, " is outside [0, ",
                                            kMaxSpeculativeTokens, "]"));
  }
  if (!step.do_sample()) {
    return ProposalError(step, "num_next_draft_proposals on a row that does not sample");
  }
  if (step.num_draft_proposals() != 0) {
    return ProposalError(step, "num_next_draft_proposals with num_draft_proposals");
  }
  return absl::OkStatus();
}

// The bounds FlattenStepPlan cannot see, checked before any proposal takes
// room: the count, no drafts of the server's beside it, and no token mask.
absl::Status CheckProposalCounts(const StepPlan& plan) {
  for (const SequenceStep& step : plan.sequences()) {
    if (absl::Status next = CheckNextProposalCount(step); !next.ok()) return next;
    const int k = step.num_draft_proposals();
    if (k == 0) continue;
    if (k < 0 || k > kMaxSpeculativeTokens) {
      return ProposalError(step, absl::StrCat("num_draft_proposals ", k, " is outside [0, ",
                                              kMaxSpeculativeTokens, "]"));
    }
    if (!step.draft_token_ids().empty()) {
      return ProposalError(step, "num_draft_proposals with draft_token_ids");
    }
    // Per-position masks follow drafts the server knows; it cannot follow
    // a grammar through the ones proposed here (a constrained row asks for
    // num_next_draft_proposals instead).
    if (step.token_mask_follows() || !step.sampling().token_mask().empty()) {
      return ProposalError(step, "num_draft_proposals with a token mask");
    }
  }
  return absl::OkStatus();
}

// The checks of a plan on a rank: the counts, then the plan with room for
// this step's proposals (`storage`, when any) against `limits`, then the
// room of the next step's.
absl::StatusOr<FlatBatch> CheckPlanWithRoom(const StepPlan& plan, const BatchLimits& limits,
                                            StepPlan* storage, bool* proposes) {
  if (absl::Status counts = CheckProposalCounts(plan); !counts.ok()) return counts;
  *proposes = HasDraftProposals(plan);
  if (*proposes) *storage = WithDraftRoom(plan);
  absl::StatusOr<FlatBatch> batch = FlattenStepPlan(*proposes ? *storage : plan, limits);
  if (!batch.ok()) return batch.status();
  if (absl::Status room = CheckAheadRoom(plan, limits); !room.ok()) return room;
  return batch;
}

// The positions the draft's passes reach on each proposing row
// (DraftPassesFit): this step's proposals after the row's tokens; the next
// step's after its tokens and drafts, every one accepted. A row past
// `draft_positions` (the draft's rotary table) is INVALID_ARGUMENT naming
// its seq_id: a server that follows the draft's max_model_len
// (common/draft_model_positions.h) never plans one.
absl::Status CheckDraftPositions(const StepPlan& plan, int draft_positions) {
  for (const SequenceStep& step : plan.sequences()) {
    const int64_t length =
        int64_t{step.start_position()} + step.token_ids_size() + step.draft_token_ids_size();
    for (const int proposals : {step.num_draft_proposals(), step.num_next_draft_proposals()}) {
      if (proposals <= 0 || DraftPassesFit(length, proposals, draft_positions)) continue;
      return ProposalError(
          step,
          absl::StrCat("draft proposals reach position ", length + proposals - 1,
                       ", outside the draft model's rotary table [0, ", draft_positions, ")"));
    }
  }
  return absl::OkStatus();
}

// The draft or head serves no adapters, and its own checkpoint's
// quantization, or the one `quantization` names (the speculative config's
// key; the target's --quantization names the target's).
LlamaLoadOptions DraftLoadOptions(const LlamaLoadOptions& target_options,
                                  const std::string& quantization) {
  LlamaLoadOptions options = target_options;
  options.num_speculative_tokens = 0;  // A pass has a logits row a sequence at most.
  options.max_loras = 0;
  options.max_lora_rank = 0;
  options.quantization = quantization;
  options.quantization_source = "--speculative-config quantization";
  return options;
}

}  // namespace

DraftModel::DraftModel(Backend* backend, Communicator* group)
    : single_rank_(group == nullptr ? CreateSingleRankCommunicator() : nullptr),
      group_(group == nullptr ? single_rank_.get() : group),
      backend_(backend) {}

absl::StatusOr<bool> ShardsDraftModel(const v1::LoadModelRequest& request) {
  const int size = request.draft_tensor_parallel_size();
  if (size <= 1) {
    if (size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("draft_tensor_parallel_size must be at least 0, got ", size));
    }
    return false;
  }
  if (size != request.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("draft_tensor_parallel_size ", size,
                                                   " must be 1 or the world size ",
                                                   request.world_size()));
  }
  return true;
}

bool HasDraftProposals(const StepPlan& plan) {
  return std::any_of(plan.sequences().begin(), plan.sequences().end(),
                     [](const SequenceStep& step) { return step.num_draft_proposals() != 0; });
}

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::Load(
    const std::string& model_dir, Backend* backend, const LlamaLoadOptions& options,
    const ModelConfig& target, Communicator* group, const std::string& quantization) {
  auto draft = std::unique_ptr<DraftModel>(new DraftModel(backend, group));
  auto model =
      LlamaModel::Load(model_dir, backend, draft->group_, DraftLoadOptions(options, quantization));
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("draft model: ", model.status().message()));
  }
  draft->model_ = *std::move(model);
  if (draft->config().vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the draft model's vocab_size ", draft->config().vocab_size,
                     " differs from the target's ", target.vocab_size));
  }
  return draft;
}

absl::StatusOr<std::unique_ptr<DraftModel>> DraftModel::LoadEagle(const std::string& head_dir,
                                                                  Backend* backend,
                                                                  const LlamaLoadOptions& options,
                                                                  LlamaModel* target, bool eagle3,
                                                                  Communicator* group) {
  auto draft = std::unique_ptr<DraftModel>(new DraftModel(backend, group));
  auto head = eagle3 ? LlamaModel::LoadEagle3Head(head_dir, backend, draft->group_,
                                                  DraftLoadOptions(options, ""), *target)
                     : LlamaModel::LoadEagleHead(head_dir, backend, draft->group_,
                                                 DraftLoadOptions(options, ""), *target);
  if (!head.ok()) return head.status();
  draft->model_ = *std::move(head);
  const std::vector<int>& layers = draft->model_->eagle3_aux_layers();
  if (!layers.empty()) {
    // An EAGLE-3 fc reads three of the target's layers' hidden states a row;
    // an EAGLE head, or an EAGLE-3 one without aux hidden states, the
    // target's final-normed hidden state.
    draft->eagle_ = std::make_unique<EagleFeatures>(layers.size() * target->hidden_row_bytes());
    target->KeepAuxHidden(layers);
  } else {
    draft->eagle_ = std::make_unique<EagleFeatures>(target->hidden_row_bytes());
    target->KeepFinalHidden();
  }
  return draft;
}

DraftModel::~DraftModel() = default;

void DraftModel::FollowTargetForward(const FlatBatch& batch, const ForwardOutput& output) {
  if (eagle_ == nullptr) return;
  // Device rows, read now: after the forward ran (a CUDA graph's replay
  // included, which writes them at their load-time address).
  const void* rows = model_->eagle3_aux_layers().empty() ? output.final_hidden : output.aux_hidden;
  if (rows != nullptr) eagle_->Capture(batch, rows, backend_);
}

void DraftModel::FollowStepResult(const StepPlan& verify,
                                  const absl::StatusOr<v1::StepResult>& result) {
  if (eagle_ == nullptr) return;
  if (result.ok()) {
    eagle_->Keep(verify);
  } else {
    eagle_->Forget();
  }
}

void DraftModel::InitCache(int block_size, DType dtype, int num_gpu_blocks, int num_cpu_blocks) {
  cache_.reset();  // Free the old cache before allocating the new one.
  cache_ = std::make_unique<CacheEngine>(backend_, model_->CacheShape(block_size, dtype),
                                         num_gpu_blocks, num_cpu_blocks);
}

absl::StatusOr<const StepPlan*> DraftModel::Propose(const StepPlan& plan, BatchLimits limits,
                                                    StepPlan* storage) {
  bool proposes = false;
  absl::StatusOr<FlatBatch> batch = CheckPlanWithRoom(plan, limits, storage, &proposes);
  if (!batch.ok()) return batch.status();
  // The target's positions bound the plan; the draft's own (fewer, for a
  // draft model of fewer positions) bound only the rows it proposes for.
  if (absl::Status fits = CheckDraftPositions(plan, model_->max_positions()); !fits.ok()) {
    return fits;
  }
  limits.max_positions = std::min(limits.max_positions, model_->max_positions());
  limits_ = limits;  // ProposeAhead's rows are within both.
  const StepPlan& verify = proposes ? *storage : plan;
  cache_->ApplyBlockMoves(*batch);
  absl::StatusOr<Drafts> drafts = is_eagle() ? RunEaglePasses(plan, *batch, AskedOf(plan))
                                             : RunPasses(*batch, AskedOf(plan), false);
  if (!drafts.ok()) return AsWorkerFault(drafts.status());
  if (!proposes) return &verify;
  for (int s = 0; s < storage->sequences_size(); ++s) {
    SequenceStep* step = storage->mutable_sequences(s);
    // An EAGLE head without kept rows proposed nothing: placeholders, which
    // repeat the input token, fill its room (any token keeps the output the
    // target's; only the acceptance suffers).
    for (int i = 0; i < step->draft_token_ids_size(); ++i) {
      const std::vector<int32_t>& mine = (*drafts)[s];
      step->set_draft_token_ids(i,
                                i < static_cast<int>(mine.size()) ? mine[i] : step->token_ids(0));
    }
  }
  return &verify;
}

absl::Status DraftModel::ForwardAndPick(const FlatBatch& batch) {
  absl::StatusOr<ForwardOutput> output =
      pass_forward_ ? pass_forward_(batch) : model_->Forward(batch, cache_.get());
  if (!output.ok()) return output.status();
  // Only rank 0 computes logits (SharePicks tells the others).
  if (group_->rank() == 0 && batch.num_logits_rows() > 0) {
    backend_->Sample(output->logits, output->sampling, &samples_);
  }
  return backend_->status();
}

namespace {

// The end of sequence s's rows in [query_start[s], end) that lie below
// `positions`: a draft model of fewer positions than the target's follows
// each row only there.
int EndBelowPositions(const FlatBatch& batch, int s, int end, int positions) {
  while (end > batch.query_start[s] && batch.positions[end - 1] >= positions) --end;
  return end;
}

}  // namespace

absl::StatusOr<DraftModel::Drafts> DraftModel::RunPasses(const FlatBatch& batch,
                                                         const std::vector<int>& asked,
                                                         bool ahead) {
  const int num_seqs = batch.num_seqs();
  Drafts drafts(num_seqs);
  if (batch.num_tokens() == 0) return drafts;
  // Per sequence, the batch's rows that hold room for drafts: one per draft
  // for this step's (the last pass writes the last draft's K/V, which the
  // target's verify row then finds), one fewer for the next step's (that
  // step's pass 0 writes them all, with the server's drafts).
  std::vector<int> room(num_seqs);
  int most = 0;
  for (int s = 0; s < num_seqs; ++s) {
    room[s] = ahead && asked[s] > 0 ? asked[s] - 1 : asked[s];
    most = std::max(most, room[s]);
  }
  // Draft j of sequence s is drawn as the target draws the token it is
  // checked against, at the sequence's logits row j of `batch`: equal
  // under greedy, coupled through the shared Gumbel noise above it (an
  // argmax instead would be accepted only when the target's draw happens to
  // be the draft model's argmax).
  const std::vector<int> first_logits_row = DraftBatchBuilder::FirstLogitsRows(batch);
  // Pass 0 follows every row of the plan but the proposals' room; a
  // proposing sequence's last input row gives its first draft. Pass j feeds
  // draft j - 1 at its own slot and (but for this step's last) gives draft j.
  // A draft model of fewer positions than the target's follows each row
  // only below them: a row past them never proposes again (Propose's
  // CheckDraftPositions), so nothing reads its K/V there.
  const int draft_positions = model_->max_positions();
  for (int pass = 0; pass <= most; ++pass) {
    DraftBatchBuilder builder(batch);
    std::vector<int> picking;  // Sequences with a logits row, in order.
    for (int s = 0; s < num_seqs; ++s) {
      const int first_room = batch.query_start[s + 1] - room[s];
      const bool picks = pass < asked[s];
      const int sampling_row = picks ? first_logits_row[s] + pass : -1;
      if (pass == 0) {
        const int followed_end = EndBelowPositions(batch, s, first_room, draft_positions);
        if (followed_end > batch.query_start[s]) {
          builder.AddSequence(s, batch.query_start[s], followed_end, -1, picks, sampling_row);
        }
      } else if (pass <= room[s]) {
        const int row = first_room + pass - 1;
        builder.AddSequence(s, row, row + 1, drafts[s][pass - 1], picks, sampling_row);
      }
      if (picks) picking.push_back(s);
    }
    FlatBatch pass_batch = builder.Take();
    if (pass_batch.num_tokens() == 0) continue;  // Every row past the draft's positions.
    if (absl::Status status = ForwardAndPick(pass_batch); !status.ok()) return status;
    if (absl::Status status = SharePicks(static_cast<int>(picking.size())); !status.ok()) {
      return status;
    }
    for (size_t i = 0; i < picking.size(); ++i) {
      drafts[picking[i]].push_back(samples_.token_ids[i]);
    }
  }
  return drafts;
}

absl::Status DraftModel::SharePicks(int num_picks) {
  if (!sharded()) return absl::OkStatus();
  // Only rank 0 computes logits: the others learn each pass's picks here,
  // before the next pass feeds them.
  std::vector<int32_t>& picks = samples_.token_ids;
  if (group_->rank() != 0) picks.assign(num_picks, 0);
  std::vector<int32_t> rows(num_picks);
  for (int i = 0; i < num_picks; ++i) rows[i] = i;
  return ShareLastSampledTokens(rows, group_, backend_, &share_staging_, &picks);
}

namespace {

// Tensor parallelism: every rank gets rank 0's drafts in `verify` (the
// others hold zeros there until now).
absl::Status ShareDrafts(const DraftSource& source, StepPlan* verify) {
  std::vector<int32_t> drafts;
  for (const SequenceStep& step : verify->sequences()) {
    drafts.insert(drafts.end(), step.draft_token_ids().begin(), step.draft_token_ids().end());
  }
  std::vector<int32_t> rows(drafts.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int32_t>(i);
  absl::Status shared =
      ShareLastSampledTokens(rows, source.communicator, source.backend, source.staging, &drafts);
  if (!shared.ok()) return AsWorkerFault(shared);
  size_t next = 0;
  for (SequenceStep& step : *verify->mutable_sequences()) {
    for (int32_t& draft : *step.mutable_draft_token_ids()) draft = drafts[next++];
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const StepPlan*> PlanToVerify(const DraftSource& source, const StepPlan& plan,
                                             const BatchLimits& limits, StepPlan* storage) {
  if (!source.served) {
    for (const SequenceStep& step : plan.sequences()) {
      if (step.num_draft_proposals() != 0 || step.num_next_draft_proposals() != 0) {
        return ProposalError(step,
                             step.num_draft_proposals() != 0
                                 ? "num_draft_proposals, but this worker loaded no draft model"
                                 : "num_next_draft_proposals, but this worker loaded no "
                                   "draft model");
      }
    }
    return &plan;
  }
  absl::StatusOr<const StepPlan*> verify;
  if (source.draft != nullptr) {
    verify = source.draft->Propose(plan, limits, storage);
  } else {  // Another rank: the same checks, room for the drafts to come.
    bool proposes = false;
    if (absl::Status valid = CheckPlanWithRoom(plan, limits, storage, &proposes).status();
        !valid.ok()) {
      return valid;
    }
    if (!proposes) return &plan;
    verify = storage;
  }
  const bool drafts_known = source.draft != nullptr && source.draft->sharded();
  if (!verify.ok() || *verify != storage || source.communicator == nullptr || drafts_known) {
    return verify;
  }
  if (absl::Status shared = ShareDrafts(source, storage); !shared.ok()) return shared;
  return verify;
}

}  // namespace pagoda::worker
