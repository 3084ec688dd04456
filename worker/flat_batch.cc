#include "worker/flat_batch.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/sampling_limits.h"
#include "common/speculation_limits.h"
#include "worker/draft_verification.h"
#include "worker/logits_edits.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::BlockMove;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;

absl::Status SequenceError(const SequenceStep& step, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("seq_id ", step.seq_id(), ": ", problem));
}

int MaskWords(int vocab_size) { return (vocab_size + 31) / 32; }

absl::Status CheckTokenMask(const SequenceStep& step, int vocab_size) {
  if (step.sampling().token_mask().empty()) return absl::OkStatus();
  absl::Status status = CheckTokenMaskBytes(step.sampling().token_mask(), vocab_size);
  if (!status.ok()) return SequenceError(step, status.message());
  return absl::OkStatus();
}

absl::Status CheckSampling(const SequenceStep& step, int vocab_size) {
  const auto& sampling = step.sampling();
  if (std::isnan(sampling.temperature()) || sampling.temperature() < 0) {
    return SequenceError(step,
                         absl::StrCat("temperature ", sampling.temperature(), " must be >= 0"));
  }
  if (std::isnan(sampling.top_p()) || sampling.top_p() < 0 || sampling.top_p() > 1) {
    return SequenceError(step, absl::StrCat("top_p ", sampling.top_p(), " must be in [0, 1]"));
  }
  if (sampling.top_k() < 0) {
    return SequenceError(step, absl::StrCat("top_k ", sampling.top_k(), " must be >= 0"));
  }
  if (sampling.num_logprobs() < 0 || sampling.num_logprobs() > kMaxTopLogprobs) {
    return SequenceError(step, absl::StrCat("num_logprobs ", sampling.num_logprobs(),
                                            " must be in [0, ", kMaxTopLogprobs, "]"));
  }
  const int64_t context = static_cast<int64_t>(step.start_position()) + step.token_ids_size();
  absl::Status processing = CheckLogitsProcessing(sampling, vocab_size, context);
  if (!processing.ok()) return SequenceError(step, processing.message());
  if (step.token_mask_follows() && !sampling.token_mask().empty()) {
    return SequenceError(step, "token_mask_follows with a token_mask in the plan");
  }
  return CheckTokenMask(step, vocab_size);
}

// The logits processing of one sampled row, into the batch's row arrays.
void AppendRowProcessing(const pagoda::worker::v1::SamplingOptions& sampling,
                         bool mask_follows, int vocab_size, FlatBatch& batch) {
  batch.min_p.push_back(sampling.min_p());
  batch.penalties.push_back(PenaltiesOf(sampling));
  AppendLogitEdits(sampling, vocab_size, &batch.edits);
  batch.edit_offsets.push_back(static_cast<int32_t>(batch.edits.size()));
  batch.processed_logprobs.push_back(sampling.processed_logprobs() ? 1 : 0);
  const std::string& mask = sampling.token_mask();
  if (mask_follows) {
    // Room for the mask that follows (ApplyStepMasks), so the upload before
    // the forward pass already has its final layout.
    batch.pending_mask_rows.push_back(batch.num_logits_rows() - 1);
    batch.mask_offsets.push_back(static_cast<int32_t>(batch.token_masks.size()));
    batch.token_masks.resize(batch.token_masks.size() + MaskWords(vocab_size), 0);
    return;
  }
  if (mask.empty()) {
    batch.mask_offsets.push_back(-1);
    return;
  }
  // Checked by CheckTokenMask: MaskWords(vocab_size) little-endian words.
  static_assert(std::endian::native == std::endian::little);
  batch.mask_offsets.push_back(static_cast<int32_t>(batch.token_masks.size()));
  const size_t first = batch.token_masks.size();
  batch.token_masks.resize(first + MaskWords(vocab_size));
  std::memcpy(batch.token_masks.data() + first, mask.data(), mask.size());
}

// Block moves of one kind, checked: in range, every destination written once
// (two writes to one block would race on a device, and no block manager
// means that), and, for moves within one cache (`same_cache`, copy-on-write),
// no destination that is also a source, so the moves' order cannot matter
// and coalesced copies never overlap.
absl::StatusOr<std::vector<BlockPair>> ConvertMoves(
    const google::protobuf::RepeatedPtrField<BlockMove>& moves, absl::string_view kind,
    int num_src_blocks, int num_dst_blocks, bool same_cache) {
  std::vector<BlockPair> pairs;
  pairs.reserve(moves.size());
  absl::flat_hash_set<int> destinations;
  for (const BlockMove& move : moves) {
    if (move.src() < 0 || move.src() >= num_src_blocks || move.dst() < 0 ||
        move.dst() >= num_dst_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          kind, " move ", move.src(), " -> ", move.dst(), " is out of range (source blocks: ",
          num_src_blocks, ", destination blocks: ", num_dst_blocks, ")"));
    }
    if (!destinations.insert(move.dst()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " moves write block ", move.dst(), " more than once"));
    }
    pairs.push_back({move.src(), move.dst()});
  }
  if (same_cache) {
    for (const BlockPair& pair : pairs) {
      if (destinations.contains(pair.src)) {
        return absl::InvalidArgumentError(
            absl::StrCat(kind, " moves both read and write block ", pair.src));
      }
    }
  }
  return pairs;
}

// Prompt logprobs: a target per row at most, each a token, a top count in
// [0, kMaxTopLogprobs].
absl::Status CheckPromptLogprobs(const SequenceStep& step, int vocab_size) {
  if (step.num_prompt_top_logprobs() < 0 || step.num_prompt_top_logprobs() > kMaxTopLogprobs) {
    return SequenceError(step, absl::StrCat("num_prompt_top_logprobs ",
                                            step.num_prompt_top_logprobs(), " must be in [0, ",
                                            kMaxTopLogprobs, "]"));
  }
  if (step.prompt_logprob_token_ids_size() > step.token_ids_size()) {
    return SequenceError(step, absl::StrCat(step.prompt_logprob_token_ids_size(),
                                            " prompt_logprob_token_ids for ",
                                            step.token_ids_size(), " token rows"));
  }
  for (int32_t token : step.prompt_logprob_token_ids()) {
    if (token < 0 || token >= vocab_size) {
      return SequenceError(step, absl::StrCat("prompt logprob token id ", token,
                                              " is outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// Speculative drafts: at most kMaxSpeculativeTokens, each in the
// vocabulary, only on a row that samples without an inline token mask (it
// holds for one position; masks that follow the plan come one per verified
// position, StepMasks) and without beam search's processed logprobs.
absl::Status CheckDrafts(const SequenceStep& step, int vocab_size) {
  const int drafts = step.draft_token_ids_size();
  if (drafts == 0) return absl::OkStatus();
  if (drafts > kMaxSpeculativeTokens) {
    return SequenceError(step, absl::StrCat(drafts, " draft_token_ids, at most ",
                                            kMaxSpeculativeTokens));
  }
  if (!step.do_sample()) {
    return SequenceError(step, "draft_token_ids on a row that does not sample");
  }
  if (!step.sampling().token_mask().empty()) {
    return SequenceError(step, "draft_token_ids with a token_mask in the plan");
  }
  if (step.sampling().processed_logprobs()) {
    return SequenceError(step, "draft_token_ids with processed_logprobs (beam search)");
  }
  for (int32_t token : step.draft_token_ids()) {
    if (token < 0 || token >= vocab_size) {
      return SequenceError(
          step, absl::StrCat("draft token id ", token, " is outside [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// Overlap's placeholder: only on a decode row of one token that samples
// without drafts, an inline mask or beam search's processed logprobs, and
// only for a seq_id sampled in the worker's previous step, which must be
// step `step_id` - 1 (a restarted worker, or one that ran another step
// between or runs plans out of order, has no such token). A mask that
// follows the plan is allowed: the server computes it once the previous
// step's token reached it, and the sampler waits for it after the forward
// pass; an inline mask was built before that token was known.
absl::Status CheckPlaceholder(const SequenceStep& step, int64_t step_id,
                              const BatchLimits& limits) {
  if (!step.input_from_last_sample()) return absl::OkStatus();
  if (step.token_ids_size() != 1 || step.start_position() == 0 || !step.do_sample()) {
    return SequenceError(step,
                         "input_from_last_sample only on a decode row of one token that samples");
  }
  if (!step.draft_token_ids().empty()) {
    return SequenceError(step, "input_from_last_sample with draft_token_ids");
  }
  if (!step.sampling().token_mask().empty()) {
    return SequenceError(step, "input_from_last_sample with a token mask in the plan");
  }
  if (step.sampling().processed_logprobs()) {
    return SequenceError(step, "input_from_last_sample with processed_logprobs (beam search)");
  }
  const LastSampledTokens* last = limits.last_sampled;
  if (last == nullptr || last->step_id() != step_id - 1) {
    return SequenceError(step, absl::StrCat("input_from_last_sample refers to step ", step_id - 1,
                                            ", but this worker's previous step is ",
                                            last == nullptr || !last->step_id().has_value()
                                                ? "none"
                                                : absl::StrCat(*last->step_id())));
  }
  if (!last->Find(step.seq_id()).has_value()) {
    return SequenceError(step,
                         "input_from_last_sample, but this worker did not sample it in its "
                         "previous step");
  }
  return absl::OkStatus();
}

// LoRA: slot 0 (the base model), or a slot of limits.lora_slots that holds
// an adapter.
absl::Status CheckLoraSlot(const SequenceStep& step, const BatchLimits& limits) {
  const int slot = step.lora_slot();
  if (slot == 0) return absl::OkStatus();
  const int max_loras = limits.lora_slots != nullptr ? limits.lora_slots->max_loras() : 0;
  if (slot < 0 || slot > max_loras) {
    return SequenceError(step, absl::StrCat("lora_slot ", slot, " is outside [0, ", max_loras,
                                            "] (max_loras ", max_loras, ")"));
  }
  if (!limits.lora_slots->loaded(slot)) {
    return SequenceError(step, absl::StrCat("lora_slot ", slot, " holds no adapter"));
  }
  return absl::OkStatus();
}

// Tokens the step computes for the sequence: its inputs, then its drafts.
int64_t StepTokens(const SequenceStep& step) {
  return static_cast<int64_t>(step.token_ids_size()) + step.draft_token_ids_size();
}

// Blocks of `block_size` tokens a context of `context` tokens spans.
int64_t BlocksFor(int64_t context, int block_size) {
  return (context + block_size - 1) / block_size;
}

// Checks one sequence of a plan against `limits` (all but the duplicate
// seq_id, which needs the whole plan) and returns the blocks its context
// spans.
absl::StatusOr<int> CheckSequence(const SequenceStep& step, int64_t step_id,
                                  const BatchLimits& limits) {
  if (step.token_ids().empty()) return SequenceError(step, "empty token_ids");
  if (step.start_position() < 0) {
    return SequenceError(step, absl::StrCat("negative start_position ", step.start_position()));
  }
  if (absl::Status drafts = CheckDrafts(step, limits.vocab_size); !drafts.ok()) return drafts;
  if (absl::Status lora = CheckLoraSlot(step, limits); !lora.ok()) return lora;
  if (absl::Status placeholder = CheckPlaceholder(step, step_id, limits); !placeholder.ok()) {
    return placeholder;
  }
  // Drafts are tokens of the step: positions, KV slots and blocks.
  const int64_t context = step.start_position() + StepTokens(step);
  if (context > limits.max_positions) {
    return SequenceError(step, absl::StrCat("positions up to ", context - 1,
                                            " are outside the rotary table [0, ",
                                            limits.max_positions, ")"));
  }
  const int64_t blocks_needed = BlocksFor(context, limits.block_size);
  if (step.block_table_start() != 0) {
    // The worker's service resolves deltas (BlockTableCache) before a runner sees the plan.
    return SequenceError(step, "block_table_start is not resolved into a whole table");
  }
  if (step.sampling_unchanged()) {  // Resolved by the same cache, or options would be lost.
    return SequenceError(step, "sampling_unchanged is not resolved into the options kept");
  }
  if (step.has_sampling_delta()) {
    return SequenceError(step, "sampling_delta is not resolved into the options kept");
  }
  if (step.block_table_size() < blocks_needed) {
    return SequenceError(
        step, absl::StrCat("block_table has ", step.block_table_size(), " blocks but ", context,
                           " tokens need ", blocks_needed));
  }
  for (int i = 0; i < blocks_needed; ++i) {
    const int32_t block = step.block_table(i);
    if (block < 0 || block >= limits.num_gpu_blocks) {
      return SequenceError(step, absl::StrCat("block id ", block, " at index ", i,
                                              " is outside [0, ", limits.num_gpu_blocks, ")"));
    }
  }
  for (int32_t token : step.token_ids()) {
    if (token < 0 || token >= limits.vocab_size) {
      return SequenceError(
          step, absl::StrCat("token id ", token, " is outside [0, ", limits.vocab_size, ")"));
    }
  }
  if (step.do_sample()) {
    if (absl::Status status = CheckSampling(step, limits.vocab_size); !status.ok()) return status;
  } else if (step.token_mask_follows()) {
    return SequenceError(step, "token_mask_follows on a row that does not sample");
  }
  if (absl::Status status = CheckPromptLogprobs(step, limits.vocab_size); !status.ok()) {
    return status;
  }
  return static_cast<int>(blocks_needed);
}

// The plan's swap-in, swap-out and copy moves, checked, into `batch`.
absl::Status ConvertBlockMoves(const StepPlan& plan, const BatchLimits& limits, FlatBatch* batch) {
  auto swap_in =
      ConvertMoves(plan.swap_in(), "swap_in", limits.num_cpu_blocks, limits.num_gpu_blocks,
                   /*same_cache=*/false);
  if (!swap_in.ok()) return swap_in.status();
  auto swap_out =
      ConvertMoves(plan.swap_out(), "swap_out", limits.num_gpu_blocks, limits.num_cpu_blocks,
                   /*same_cache=*/false);
  if (!swap_out.ok()) return swap_out.status();
  auto copy = ConvertMoves(plan.copy(), "copy", limits.num_gpu_blocks, limits.num_gpu_blocks,
                           /*same_cache=*/true);
  if (!copy.ok()) return copy.status();
  batch->swap_in = *std::move(swap_in);
  batch->swap_out = *std::move(swap_out);
  batch->copy = *std::move(copy);
  return absl::OkStatus();
}

// The sampling options of logits row j of `step`: a row's output counts
// gain the tokens the server could not count, the drafts before it and the
// placeholder's token (`placeholder_token`, when this rank knows it; the
// ranks that do not know it do not sample).
pagoda::worker::v1::SamplingOptions RowOptions(const SequenceStep& step, int j,
                                               int32_t placeholder_token) {
  if (j > 0) {
    return VerifyRowOptions(step.sampling(), absl::MakeConstSpan(step.draft_token_ids().data(), j));
  }
  if (placeholder_token == LastSampledTokens::kUnknownToken) return step.sampling();
  const int32_t placeholder[] = {placeholder_token};
  return VerifyRowOptions(step.sampling(), placeholder);
}

// Appends sequence `s` of the plan (checked by CheckSequence) to `batch`:
// its block table row, a row per token, and a logits row when it samples.
// REQUIRES: batch->block_tables is sized for every sequence of the plan.
void AppendSequence(const SequenceStep& step, int s, const BatchLimits& limits, FlatBatch* batch) {
  const int block_size = limits.block_size;
  const int start = step.start_position();
  const int context = start + static_cast<int>(StepTokens(step));
  const int blocks_needed = static_cast<int>(BlocksFor(context, block_size));
  std::copy_n(step.block_table().begin(), blocks_needed,
              batch->block_tables.begin() + static_cast<size_t>(s) * batch->max_blocks_per_seq);
  if (step.prompt_logprob_token_ids_size() > 0) {
    batch->prompt_logprob_rows.push_back(
        FlatBatch::PromptLogprobRows{.sequence = s,
                                     .first_row = batch->query_start.back(),
                                     .num_rows = step.prompt_logprob_token_ids_size(),
                                     .num_top = step.num_prompt_top_logprobs()});
  }
  for (int i = 0; i < context - start; ++i) {
    const int position = start + i;
    const int n = step.token_ids_size();
    batch->input_ids.push_back(i < n ? step.token_ids(i) : step.draft_token_ids(i - n));
    batch->positions.push_back(position);
    batch->lora_slots.push_back(step.lora_slot());
    batch->slot_mapping.push_back(step.block_table(position / block_size) * block_size +
                                  position % block_size);
  }
  batch->uses_lora = batch->uses_lora || step.lora_slot() != 0;
  // The previous step's token, where this rank knows it (CheckPlaceholder
  // made sure the record has the seq_id).
  int32_t placeholder_token = LastSampledTokens::kUnknownToken;
  if (step.input_from_last_sample()) {
    placeholder_token = *limits.last_sampled->Find(step.seq_id());
    batch->placeholder_rows.push_back(static_cast<int32_t>(batch->input_ids.size()) - 1);
    batch->input_ids.back() = std::max(placeholder_token, 0);
  }
  batch->query_start.push_back(static_cast<int32_t>(batch->input_ids.size()));
  batch->context_lens.push_back(context);
  if (!step.do_sample()) return;
  // One logits row for the last input and one per draft
  // (worker/draft_verification.h): row j draws output token sample_index + j.
  const int drafts = step.draft_token_ids_size();
  for (int j = 0; j <= drafts; ++j) {
    batch->logits_indices.push_back(batch->query_start.back() - 1 - drafts + j);
    batch->sample_sequences.push_back(s);
    const auto& sampling = step.sampling();
    batch->temperatures.push_back(sampling.temperature());
    batch->top_k.push_back(sampling.top_k());
    batch->top_p.push_back(sampling.top_p());
    batch->seeds.push_back(sampling.seed());
    batch->sample_indices.push_back(static_cast<uint64_t>(step.sample_index()) + j);
    batch->num_logprobs.push_back(sampling.num_logprobs());
    AppendRowProcessing(RowOptions(step, j, placeholder_token), step.token_mask_follows(),
                        limits.vocab_size, *batch);
  }
}

}  // namespace

absl::Status CheckTokenMaskBytes(absl::string_view mask, int vocab_size) {
  const size_t words = MaskWords(vocab_size);
  if (mask.size() != words * sizeof(uint32_t)) {
    return absl::InvalidArgumentError(absl::StrCat("token_mask has ", mask.size(),
                                                   " bytes, expected ", words * sizeof(uint32_t)));
  }
  bool any = false;
  for (size_t w = 0; w < words; ++w) {
    uint32_t word;
    std::memcpy(&word, mask.data() + w * sizeof(uint32_t), sizeof(word));
    const int first_id = static_cast<int>(w * 32);
    if (first_id + 32 > vocab_size && (word >> (vocab_size - first_id)) != 0) {
      return absl::InvalidArgumentError("token_mask allows a token outside the vocabulary");
    }
    any = any || word != 0;
  }
  // A row with none could only fall back to a token the constraint refuses.
  if (!any) return absl::InvalidArgumentError("token_mask allows no token");
  return absl::OkStatus();
}

absl::Status ApplyStepMasks(const StepPlan& plan, const pagoda::worker::v1::StepMasks& masks,
                            int vocab_size, FlatBatch* batch) {
  if (masks.step_id() != plan.step_id()) {
    return absl::InvalidArgumentError(absl::StrCat("token masks for step ", masks.step_id(),
                                                   " arrived for step ", plan.step_id()));
  }
  const std::vector<int32_t>& rows = batch->pending_mask_rows;
  if (masks.rows_size() != static_cast<int>(rows.size())) {
    return absl::InvalidArgumentError(absl::StrCat("step ", plan.step_id(), " has ",
                                                   masks.rows_size(), " token masks, its plan promised ",
                                                   rows.size()));
  }
  // Everything is checked before anything is written.
  for (size_t i = 0; i < rows.size(); ++i) {
    const SequenceStep& step = plan.sequences(batch->sample_sequences[rows[i]]);
    const pagoda::worker::v1::RowTokenMask& row = masks.rows(static_cast<int>(i));
    if (row.seq_id() != step.seq_id()) {
      return absl::InvalidArgumentError(absl::StrCat("token mask ", i, " is for seq_id ",
                                                     row.seq_id(), ", the plan's is ", step.seq_id()));
    }
    if (row.token_mask().empty()) continue;
    absl::Status checked = CheckTokenMaskBytes(row.token_mask(), vocab_size);
    if (!checked.ok()) return SequenceError(step, checked.message());
  }
  static_assert(std::endian::native == std::endian::little);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string& mask = masks.rows(static_cast<int>(i)).token_mask();
    int32_t& offset = batch->mask_offsets[rows[i]];
    if (mask.empty()) {
      offset = -1;  // Unconstrained: its reserved words stay unread.
    } else {
      std::memcpy(batch->token_masks.data() + offset, mask.data(), mask.size());
    }
  }
  batch->pending_mask_rows.clear();
  return absl::OkStatus();
}

absl::StatusOr<FlatBatch> FlattenStepPlan(const StepPlan& plan, const BatchLimits& limits) {
  // Everything is checked before anything is flattened: a rejected plan
  // touches nothing.
  FlatBatch batch;
  absl::flat_hash_set<int64_t> seen;
  for (const SequenceStep& step : plan.sequences()) {
    if (!seen.insert(step.seq_id()).second) return SequenceError(step, "duplicate seq_id");
    auto blocks_needed = CheckSequence(step, plan.step_id(), limits);
    if (!blocks_needed.ok()) return blocks_needed.status();
    batch.max_blocks_per_seq = std::max(batch.max_blocks_per_seq, *blocks_needed);
  }
  if (absl::Status status = ConvertBlockMoves(plan, limits, &batch); !status.ok()) return status;

  const int num_seqs = plan.sequences_size();
  batch.query_start.push_back(0);
  batch.block_tables.assign(static_cast<size_t>(num_seqs) * batch.max_blocks_per_seq, 0);
  for (int s = 0; s < num_seqs; ++s) {
    AppendSequence(plan.sequences(s), s, limits, &batch);
  }
  return batch;
}

namespace {

// Appends logits row `row`'s top logprobs (as many as its sequence asked
// for) to `top`.
void AppendTopLogprobs(const FlatBatch& batch, const SampleResults& samples, int row,
                       google::protobuf::RepeatedPtrField<pagoda::worker::v1::TokenLogprob>* top) {
  const size_t first = static_cast<size_t>(row) * samples.num_logprobs;
  const int wanted = std::min(batch.num_logprobs[row], samples.num_logprobs);
  for (int i = 0; i < wanted; ++i) {
    auto* entry = top->Add();
    entry->set_token_id(samples.top_ids[first + i]);
    entry->set_logprob(samples.top_logprobs[first + i]);
  }
}

}  // namespace

void AppendSampledTokens(const StepPlan& plan, const FlatBatch& batch, const SampleResults& samples,
                         pagoda::worker::v1::StepResult* result) {
  // A sequence's rows are consecutive: its last input's, then one per draft.
  for (int row = 0; row < batch.num_logits_rows();) {
    const SequenceStep& step = plan.sequences(batch.sample_sequences[row]);
    const auto drafts = absl::MakeConstSpan(step.draft_token_ids());
    const int accepted = CountAcceptedDrafts(
        drafts, absl::MakeConstSpan(samples.token_ids).subspan(row, drafts.size() + 1));
    auto* token = result->add_tokens();
    token->set_seq_id(step.seq_id());
    for (int j = 0; j < accepted; ++j) {
      token->add_accepted_draft_ids(drafts[j]);
      token->add_accepted_draft_logprobs(samples.logprobs[row + j]);
      AppendTopLogprobs(batch, samples, row + j, token->mutable_accepted_draft_top());
    }
    const int last = row + accepted;
    token->set_token_id(samples.token_ids[last]);
    token->set_logprob(samples.logprobs[last]);
    AppendTopLogprobs(batch, samples, last, token->mutable_top());
    row += static_cast<int>(drafts.size()) + 1;
  }
}

}  // namespace pagoda::worker
