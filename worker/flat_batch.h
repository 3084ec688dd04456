#ifndef PAGODA_WORKER_FLAT_BATCH_H_
#define PAGODA_WORKER_FLAT_BATCH_H_

// A step plan flattened on the host: FlattenStepPlan checks a StepPlan against
// the worker's BatchLimits and turns its per-sequence steps into the per-token
// arrays of a FlatBatch. Host memory only; moving a FlatBatch to the device is
// worker/step_batch_upload.h.

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/logits_processing.h"
#include "pagoda/worker/v1/worker.pb.h"
#include "worker/backend.h"
#include "worker/last_sampled_tokens.h"
#include "worker/lora/lora_slots.h"

namespace pagoda::worker {

// What a plan is checked against.
struct BatchLimits {
  int vocab_size = 0;
  int block_size = 0;
  int num_gpu_blocks = 0;
  int num_cpu_blocks = 0;
  // Positions must stay below this: the rotary table's size on backends that
  // read only the table (LlamaModel::max_positions()). ExecuteStepPlan always
  // sets it; the default only spares tests that do not care.
  int max_positions = std::numeric_limits<int32_t>::max();
  // The tokens this worker sampled in its previous step, which
  // input_from_last_sample rows refer to; null: such rows are refused.
  const LastSampledTokens* last_sampled = nullptr;
  // LoRA: the adapter slots as this step sees them (LlamaModel::
  // PinLoraSlots), which SequenceStep.lora_slot may name if loaded; null:
  // only slot 0 (the base model).
  const LoraSlots::View* lora_slots = nullptr;
};

// A StepPlan flattened into the arrays the model and attention consume: the
// one place that turns per-sequence steps into per-token rows.
struct FlatBatch {
  // Per token, in plan order (sequence by sequence).
  std::vector<int32_t> input_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> slot_mapping;
  // Per sequence: token rows [query_start[s], query_start[s+1]); context_lens
  // = start_position + number of tokens; block tables padded to
  // max_blocks_per_seq with 0 (never read past the context).
  std::vector<int32_t> query_start;
  // Token rows whose input is a placeholder (SequenceStep.
  // input_from_last_sample), in plan order. Their input_ids already hold the
  // token sampled in the previous step where this rank knows it (rank 0),
  // else 0 until ShareLastSampledTokens fills them in before the forward
  // pass.
  std::vector<int32_t> placeholder_rows;
  // Per token row, its sequence's SequenceStep.lora_slot (0: the base
  // model); uses_lora when any is not 0.
  std::vector<int32_t> lora_slots;
  bool uses_lora = false;
  std::vector<int32_t> context_lens;
  std::vector<int32_t> block_tables;
  int max_blocks_per_seq = 0;
  // Rows whose logits are needed: the last input token of each do_sample
  // sequence, then each of its drafts (consecutive rows, draft j's sampling
  // options as worker/draft_verification.h says), and which plan sequence
  // each belongs to.
  std::vector<int32_t> logits_indices;
  std::vector<int32_t> sample_sequences;
  // Per logits row, the sequence's sampling options (the arrays of
  // SamplingBatch): temperature, top_k, top_p, seed, sample_index and the
  // number of top logprobs it asked for.
  std::vector<float> temperatures;
  std::vector<int32_t> top_k;
  std::vector<float> top_p;
  std::vector<uint64_t> seeds;
  std::vector<uint64_t> sample_indices;
  std::vector<int32_t> num_logprobs;
  // Per logits row, logits processing (common/logits_processing.h): min_p,
  // the penalties, and the row's edits [edit_offsets[r], edit_offsets[r+1])
  // of `edits` (sorted by token id). edit_offsets has num_logits_rows + 1
  // entries.
  std::vector<float> min_p;
  std::vector<LogitPenalties> penalties;
  std::vector<int32_t> edit_offsets{0};
  std::vector<LogitEdit> edits;
  // Per logits row, the word offset of its token mask in `token_masks`
  // (TokenMaskAllows), or -1 for a row without one; masks are
  // ceil(vocab_size / 32) words each.
  std::vector<int32_t> mask_offsets;
  std::vector<uint32_t> token_masks;
  // Logits rows whose mask follows the plan (SequenceStep.token_mask_follows),
  // in plan order: their words in `token_masks` are reserved, zero, until
  // ApplyStepMasks fills them.
  std::vector<int32_t> pending_mask_rows;
  // Per logits row, 1 when its logprobs are those of the processed logits
  // (SamplingOptions.processed_logprobs: beam search), else 0.
  std::vector<uint8_t> processed_logprobs;
  // Prompt logprobs: each plan sequence that asks for them, its first
  // token row, and how many of its rows (from the first) report one.
  struct PromptLogprobRows {
    int sequence = 0;  // Index in the plan.
    int first_row = 0;
    int num_rows = 0;
    int num_top = 0;
  };
  std::vector<PromptLogprobRows> prompt_logprob_rows;
  // Block moves, in the plan's order.
  std::vector<BlockPair> swap_in, swap_out, copy;

  int num_tokens() const { return static_cast<int>(input_ids.size()); }
  int num_seqs() const { return static_cast<int>(context_lens.size()); }
  int num_logits_rows() const { return static_cast<int>(logits_indices.size()); }
  bool wants_prompt_logprobs() const { return !prompt_logprob_rows.empty(); }
  bool awaits_masks() const { return !pending_mask_rows.empty(); }
};

// Validates `plan` and flattens it. INVALID_ARGUMENT, naming the seq_id and
// the problem, for: an empty token list, a duplicate seq_id, a negative start
// position, a token id outside [0, vocab_size), a block_table_start not 0 or a
// sampling_unchanged or sampling_delta (deltas are resolved before, worker/block_table_cache.h), a block table too short for
// start_position + len(token_ids) tokens, a context past max_positions
// (the rotary table), a block id outside
// [0, num_gpu_blocks), sampling options out of range (negative or NaN
// temperature, top_p outside [0, 1], negative top_k, num_logprobs outside
// [0, 20], logits processing out of bounds: worker/logits_edits.h, a token
// mask of the wrong size, with bits past the vocabulary or with none set,
// token_mask_follows on a row that does not sample or that has a token_mask);
// prompt logprobs asked of more rows than the chunk has, of a token outside
// the vocabulary, or with num_prompt_top_logprobs outside [0, 20]; drafts
// past kMaxSpeculativeTokens, outside the vocabulary, on a row that does not
// sample or with a token_mask in the plan or processed_logprobs (drafts are
// tokens of the step: the positions and block table checks count them; a
// row whose masks follow gets one per verified position); a placeholder
// (input_from_last_sample) anywhere but on a sampled decode row of one token
// without drafts, a token mask in the plan (one that follows it is
// allowed) or processed_logprobs, or for a seq_id that
// limits.last_sampled did not sample in the previous step; and for block
// moves with ids outside their cache; a lora_slot outside [0, max_loras] or
// naming an empty slot (limits.lora_slots). A placeholder row's input is the
// previous step's token, which its logits processing counts as one more
// output token (the server's counts stop before it).
absl::StatusOr<FlatBatch> FlattenStepPlan(const pagoda::worker::v1::StepPlan& plan,
                                          const BatchLimits& limits);

// OK when `mask` is a token mask of a vocabulary of `vocab_size`
// (SamplingOptions.token_mask): MaskWords words exactly, no bit past the
// vocabulary, at least one set; INVALID_ARGUMENT naming the problem.
absl::Status CheckTokenMaskBytes(absl::string_view mask, int vocab_size);

// Fills the masks that followed `plan` into its flattened `batch`: the
// second half of the trust boundary, for the rows FlattenStepPlan reserved
// (pending_mask_rows: a row with k drafts reserved k + 1, one per verified
// position, which take the StepMasks' rows in order). INVALID_ARGUMENT, with `batch` unchanged, when
// `masks` is for another step, has another number of rows, names another
// seq_id at some row, or carries a mask CheckTokenMaskBytes refuses. An
// empty row mask leaves its row unconstrained (mask_offsets -1).
// REQUIRES: `batch` is FlattenStepPlan(plan, limits) with
// limits.vocab_size == vocab_size.
absl::Status ApplyStepMasks(const pagoda::worker::v1::StepPlan& plan,
                            const pagoda::worker::v1::StepMasks& masks, int vocab_size,
                            FlatBatch* batch);

// Appends one SampledToken per sampled sequence of `batch` to `result`, in
// plan order: the sequence's seq_id, the sampled token and its logprob, and
// the top logprobs that sequence asked for (at most samples.num_logprobs).
// A sequence with drafts gets the drafts CountAcceptedDrafts accepts (with
// their logprobs and top logprobs) and the token sampled at the row after
// them.
// REQUIRES: `samples` came from Backend::Sample over `batch`'s logits, and
// `batch` from FlattenStepPlan(plan, ...).
void AppendSampledTokens(const pagoda::worker::v1::StepPlan& plan, const FlatBatch& batch,
                         const SampleResults& samples, pagoda::worker::v1::StepResult* result);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_FLAT_BATCH_H_
