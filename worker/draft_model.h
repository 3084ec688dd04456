#ifndef PAGODA_WORKER_DRAFT_MODEL_H_
#define PAGODA_WORKER_DRAFT_MODEL_H_

// DraftModel: speculative decoding's draft_model and eagle methods on the
// worker. A second, smaller LlamaModel (a draft model, or an EAGLE head over
// the target's hidden states) with its own KV cache over the target's block
// ids, which follows every row the target computes and proposes the drafts a
// plan asks for (SequenceStep.num_draft_proposals) by single-token passes,
// before the target verifies them, or after the step for its next one
// (num_next_draft_proposals: a constrained row's, which the server checks
// against the grammar first). docs/speculative-decoding.md.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/eagle_features.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {

// The draft model of one worker: on rank 0 of its group at tensor-parallel
// size 1, or one shard of it on every rank of the group (at the target's
// size). Thread safety: one caller at a time, as the runner that owns it.
class DraftModel {
 public:
  // Loads `model_dir` on `backend`: whole, as one rank of its own, when
  // `group` is null; else this rank's shard of it over `group` (the
  // target's), whose every rank must then load it and call Propose with the
  // same plans: each pass's all-reduces run over the group, and rank 0's
  // picks reach the others after each pass. INVALID_ARGUMENT when its
  // vocabulary size is not `target`'s (naming both); the loader's errors
  // otherwise (a model the group cannot split among them). `options.
  // max_loras` and `options.quantization` are ignored: the draft serves no
  // adapters, and the quantization `quantization` names (the speculative
  // config's key, checked against the draft's checkpoint as --quantization
  // is against the target's; "": the checkpoint's own). backend and group
  // must outlive the draft.
  static absl::StatusOr<std::unique_ptr<DraftModel>> Load(const std::string& model_dir,
                                                          Backend* backend,
                                                          const LlamaLoadOptions& options,
                                                          const ModelConfig& target,
                                                          Communicator* group = nullptr,
                                                          const std::string& quantization = "");
  // The eagle method: the EAGLE head in `head_dir` (LlamaModel::
  // LoadEagleHead) over `target`, which from now on keeps its final hidden
  // states (LlamaModel::KeepFinalHidden) for the head. Errors as
  // LoadEagleHead's. target must outlive the head. With `eagle3`, the
  // eagle3 method: an EAGLE-3 head (LlamaModel::LoadEagle3Head), and the
  // target keeps its aux layers' hidden states (LlamaModel::KeepAuxHidden).
  // With `group` (the target's), this rank's shard of the head, as Load's:
  // its decoder layer split as the target's layers are, its fc replicated,
  // the features this rank's own copy of the target's (replicated) hidden
  // states; only rank 0 computes logits.
  static absl::StatusOr<std::unique_ptr<DraftModel>> LoadEagle(
      const std::string& head_dir, Backend* backend, const LlamaLoadOptions& options,
      LlamaModel* target, bool eagle3 = false, Communicator* group = nullptr);
  DraftModel(const DraftModel&) = delete;
  DraftModel& operator=(const DraftModel&) = delete;
  ~DraftModel();

  const ModelConfig& config() const { return model_->config(); }
  size_t weight_bytes() const { return model_->weight_bytes(); }
  // Bytes of one block of the draft's cache: the target's block ids span
  // both caches, so the runner divides its memory by the sum.
  int64_t bytes_per_block(int block_size, DType dtype) const {
    return model_->CacheShape(block_size, dtype).bytes_per_block();
  }

  bool is_eagle() const { return eagle_ != nullptr; }
  // Whether every rank of a group holds a shard (Load with a group of more
  // than one rank): every rank then knows the drafts once Propose returns.
  bool sharded() const { return group_->world_size() > 1; }

  // The eagle method's bookkeeping around each target step (nothing for a
  // draft model): after the target's forward over `batch`, its hidden
  // states; after the step, the rows it verified (on success) or nothing
  // (on failure: the head then lacks features and proposes worse drafts
  // until its sequences' next steps).
  void FollowTargetForward(const FlatBatch& batch, const ForwardOutput& output);
  void FollowStepResult(const v1::StepPlan& verify, const absl::StatusOr<v1::StepResult>& result);

  // Frees the old cache, then allocates one of the target's block counts.
  void InitCache(int block_size, DType dtype, int num_gpu_blocks, int num_cpu_blocks);
  void ReleaseCache() { cache_.reset(); }

  // A draft model's passes through `forward` instead of its own eager
  // Forward (the CUDA runner's graphs over model() and cache()); null
  // restores the eager one. An EAGLE head's passes ignore it.
  using PassForward = std::function<absl::StatusOr<ForwardOutput>(const FlatBatch& batch)>;
  void set_pass_forward(PassForward forward) { pass_forward_ = std::move(forward); }
  LlamaModel* model() { return model_.get(); }
  CacheEngine* cache() { return cache_.get(); }  // Null before InitCache.

  // The plan the target is to verify: `plan` itself when it asks for no
  // proposals, else a copy in `storage` with each row's
  // num_draft_proposals turned into as many draft_token_ids, proposed here.
  // Validates first (FlattenStepPlan against `limits`, the proposals
  // counted as drafts; each proposing row's passes within the draft's own
  // positions, DraftPassesFit, else INVALID_ARGUMENT naming its seq_id): a
  // refused plan is INVALID_ARGUMENT and touches nothing. Then applies the
  // plan's block moves to the draft's cache, runs the draft over every row
  // of the plan below its positions (writing its K/V where the target
  // writes its own), and for the proposing rows k greedy passes, the last
  // one only writing the last draft's K/V, so that the next step finds
  // every verified position in the draft's cache. Failures after
  // validation are worker faults (AsWorkerFault). REQUIRES: InitCache ran.
  absl::StatusOr<const v1::StepPlan*> Propose(const v1::StepPlan& plan, BatchLimits limits,
                                              v1::StepPlan* storage);

  // After the step that verified `verify` (the plan Propose returned)
  // succeeded with `result` (this rank's: only rank 0's holds tokens): the
  // proposals its rows ask for after their accepted tokens
  // (num_next_draft_proposals), into the rows' SampledToken.next_draft_ids
  // (rank 0). Passes as Propose's, from the step's last token (an EAGLE
  // head: from the rows the step verified), writing the draft's K/V past
  // the accepted tokens, inside the room the plan's block tables hold
  // (CheckAheadRoom); the next step's pass 0 rewrites those positions with
  // the tokens it computes, so nothing reads what a rejected proposal
  // wrote. Sharded, every rank runs them (rank 0 shares what the step
  // accepted first). Failures are worker faults. REQUIRES: Propose
  // accepted `verify`'s plan.
  absl::Status ProposeAhead(const v1::StepPlan& verify, v1::StepResult* result);

 private:
  // Per row of a batch, the drafts proposed for it.
  using Drafts = std::vector<std::vector<int32_t>>;

  DraftModel(Backend* backend, Communicator* group);
  // The passes over `batch`, which holds per sequence its rows and then
  // room for `asked[s]` drafts (`ahead`: one fewer, proposals for the next
  // step, whose last K/V nothing needs now); the drafts proposed.
  absl::StatusOr<Drafts> RunPasses(const FlatBatch& batch, const std::vector<int>& asked,
                                   bool ahead);
  // One forward of the draft over `batch`, and the greedy token of each of
  // its logits rows in samples_.
  absl::Status ForwardAndPick(const FlatBatch& batch);
  // The eagle method's passes (draft_eagle_passes.cc): pass 0 reads, per
  // sequence, the target's kept rows before its first position (the head's
  // rows that lag the target by one token) and gives the first draft; pass
  // j feeds draft j at its position with the head's own output of pass
  // j - 1 as the feature, giving draft j + 1. k passes in all.
  // `plan`: `batch`'s (its seq_ids). A sequence without kept rows proposes
  // nothing.
  absl::StatusOr<Drafts> RunEaglePasses(const v1::StepPlan& plan, const FlatBatch& batch,
                                        const std::vector<int>& asked);
  // Sharded: every rank gets rank 0's `accepted_and_last` (per proposing
  // row, the drafts its step accepted and its last token).
  absl::Status ShareAheadInputs(std::vector<int32_t>* accepted_and_last);
  // One forward of the head over `batch` with `features` (host, one row per
  // token: the target's when `from_target`, else the head's own), the greedy
  // tokens in samples_ and each logits row's output hidden state in
  // `head_hidden` (host).
  absl::Status EagleForwardAndPick(const FlatBatch& batch, const std::vector<char>& features,
                                   bool from_target, std::vector<char>* head_hidden);

  // Sharded: gives every rank rank 0's picks of the last pass in samples_.
  absl::Status SharePicks(int num_picks);

  std::unique_ptr<Communicator> single_rank_;
  Communicator* group_;                    // single_rank_, or the group the draft is sharded over.
  std::unique_ptr<Buffer> share_staging_;  // SharePicks' device buffer.
  std::unique_ptr<LlamaModel> model_;
  std::unique_ptr<CacheEngine> cache_;
  Backend* backend_ = nullptr;
  SampleResults samples_;
  std::unique_ptr<EagleFeatures> eagle_;  // The eagle method's; null for a draft model.
  BatchLimits limits_;        // The last plan Propose accepted was checked against these.
  PassForward pass_forward_;  // set_pass_forward's; null: model_->Forward.
};

// Whether `request`'s draft model is sharded over the group (its
// draft_tensor_parallel_size is the world size, above 1) rather than whole
// on rank 0 (0 or 1); the same for an EAGLE or EAGLE-3 head.
// INVALID_ARGUMENT, naming the value, for any other size.
absl::StatusOr<bool> ShardsDraftModel(const v1::LoadModelRequest& request);

// Whether any row of `plan` asks for proposals.
bool HasDraftProposals(const v1::StepPlan& plan);

// Whether any row of `plan` asks for proposals after the step
// (num_next_draft_proposals).
bool HasNextDraftProposals(const v1::StepPlan& plan);

// INVALID_ARGUMENT, naming the seq_id, when a row's next-step proposals
// would not fit: once all its drafts were accepted they run at positions
// start_position + token_ids_size + draft_token_ids_size onwards, which
// its block table (blocks within `limits`) and the rotary table must hold.
absl::Status CheckAheadRoom(const v1::StepPlan& plan, const BatchLimits& limits);

// Where a runner's drafts come from, and how they reach every rank.
struct DraftSource {
  // This rank's draft model: rank 0's, or every rank's when it is sharded;
  // null on the other ranks and without one.
  DraftModel* draft = nullptr;
  // Whether the group serves a draft model (LoadModelRequest.
  // draft_model_dir): rows may then ask for proposals on every rank.
  bool served = false;
  // The group (ShareLastSampledTokens' collective gives the other ranks
  // rank 0's drafts), the backend and its staging buffer for it.
  Communicator* communicator = nullptr;
  Backend* backend = nullptr;
  std::unique_ptr<Buffer>* staging = nullptr;
};

// What a runner verifies for `plan`: `plan` itself when it asks for no
// proposals (the draft still follows its rows), else a copy in `storage`
// with rank 0's proposals as draft_token_ids on every rank (with a draft on
// rank 0 only, the other ranks validate the plan the same way, then receive
// them; a sharded draft proposes on every rank).
// INVALID_ARGUMENT when a row asks for proposals and the group serves no
// draft model (naming the seq_id), or as Propose; a failed collective is a
// worker fault.
absl::StatusOr<const v1::StepPlan*> PlanToVerify(const DraftSource& source,
                                                 const v1::StepPlan& plan,
                                                 const BatchLimits& limits, v1::StepPlan* storage);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_DRAFT_MODEL_H_
