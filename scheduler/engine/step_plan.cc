#include "scheduler/engine/step_plan.h"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "scheduler/engine/constraint_mask.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

void AddMoves(const std::vector<BlockMove>& moves,
              google::protobuf::RepeatedPtrField<wv1::BlockMove>* out) {
  for (const BlockMove& move : moves) {
    wv1::BlockMove* message = out->Add();
    message->set_src(move.src);
    message->set_dst(move.dst);
  }
}

// Whether the output of `seq` ends with `prefix`.
bool OutputEndsWith(const Sequence& seq, absl::Span<const int32_t> prefix) {
  const int n = seq.num_output_tokens();
  const int k = static_cast<int>(prefix.size());
  if (k > n) return false;
  for (int i = 0; i < k; ++i) {
    if (seq.output()[n - k + i].token_id != prefix[i]) return false;
  }
  return true;
}

// The bans of bad words (as vLLM v1, against the output's tail): those of
// one token, those of more (which read the output's last tokens), or both.
void AddBadWordBans(const SequenceGroup& group, const Sequence& seq, bool single_token,
                    bool multi_token, wv1::SamplingOptions* options) {
  for (const std::vector<int32_t>& word : group.sampling().bad_words_token_ids) {
    if (word.size() > 1 ? !multi_token : !single_token) continue;
    const absl::Span<const int32_t> prefix = absl::MakeConstSpan(word).first(word.size() - 1);
    if (OutputEndsWith(seq, prefix)) options->add_banned_token_ids(word.back());
  }
}

// Before min_tokens: EOS (unless ignore_eos) and the stop token ids.
void AddMinTokensBans(const SequenceGroup& group, const Sequence& seq,
                      absl::Span<const int32_t> eos_token_ids, wv1::SamplingOptions* options) {
  const StoppingOptions& stopping = group.stopping();
  if (seq.num_output_tokens() >= stopping.min_tokens) return;
  if (!stopping.ignore_eos) {
    for (int32_t id : eos_token_ids) options->add_banned_token_ids(id);
  }
  for (int32_t id : stopping.stop_token_ids) options->add_banned_token_ids(id);
}

// Tokens masked for this draw: bad words and, before min_tokens, EOS and
// the stop token ids.
void SetBannedTokens(const SequenceGroup& group, const Sequence& seq,
                     absl::Span<const int32_t> eos_token_ids, wv1::SamplingOptions* options) {
  AddBadWordBans(group, seq, /*single_token=*/true, /*multi_token=*/true, options);
  AddMinTokensBans(group, seq, eos_token_ids, options);
}

// Whether the row of `seq` bans multi-token bad words after its output's
// last token, which is the placeholder of the token in flight: the ban then
// follows the plan in the step's masks (BanMaskAfterOutput).
bool BadWordBanFollows(const SequenceGroup& group, const Sequence& seq) {
  return !IsConstrained(group) && seq.has_pending_token() &&
         group.sampling().num_multi_token_bad_words() > 0;
}

// The packed mask (SamplingOptions.token_mask's layout) of an unconstrained
// row whose multi-token bad words' ban followed the plan: every token of the
// vocabulary but those bans, read off the output now that its last token is
// in. The rest of the row's bans stayed in the plan; the worker masks both
// alike, so the draw is the one a plan holding every ban gives. Never empty:
// AdvancePastStep lets such a row overlap only while the vocabulary holds
// more tokens than it has multi-token bad words.
std::string BanMaskAfterOutput(const SequenceGroup& group, const Sequence& seq, int vocab_size) {
  std::vector<uint32_t> mask((vocab_size + 31) / 32, ~uint32_t{0});
  if (vocab_size % 32 != 0) mask.back() = (uint32_t{1} << (vocab_size % 32)) - 1;
  wv1::SamplingOptions bans;
  AddBadWordBans(group, seq, /*single_token=*/false, /*multi_token=*/true, &bans);
  for (int32_t id : bans.banned_token_ids()) {
    if (id >= 0 && id < vocab_size) mask[id / 32] &= ~(uint32_t{1} << (id % 32));
  }
  static_assert(std::endian::native == std::endian::little);
  return std::string(reinterpret_cast<const char*>(mask.data()), mask.size() * sizeof(uint32_t));
}

// The prompt logprobs the chunk of `entry` computes and its group lacks:
// targets for the chunk's rows whose next token is a prompt token.
void SetPromptLogprobTargets(const ScheduledSequence& entry, wv1::SequenceStep* step) {
  const SequenceGroup& group = *entry.group;
  if (!group.sampling().wants_prompt_logprobs()) return;
  const Sequence& seq = *entry.seq;
  // Row j predicts position start + j + 1; prompt positions end before P.
  const int rows = std::min(entry.num_tokens, seq.num_prompt_tokens() - 1 - entry.start_position);
  const int stored = group.prompt_logprobs().num_stored();  // Positions 1..stored.
  if (rows <= 0 || entry.start_position + rows <= stored) return;
  for (int j = 0; j < rows; ++j) {
    step->add_prompt_logprob_token_ids(seq.token_at(entry.start_position + j + 1));
  }
  step->set_num_prompt_top_logprobs(group.sampling().num_prompt_logprobs);
}

// The draw's options of `seq`'s row: the group's, with the sequence's own
// seed; beam search draws nothing.
void SetStepDrawOptions(const SequenceGroup& group, const Sequence& seq,
                        wv1::SamplingOptions* options) {
  const SamplingOptions& sampling = group.sampling();
  options->set_temperature(sampling.temperature);
  options->set_top_k(sampling.top_k);
  options->set_top_p(sampling.top_p);
  options->set_seed(SeedForSequence(sampling.seed, seq.index_in_group()));
  options->set_num_logprobs(sampling.num_logprobs);
  if (sampling.use_beam_search) {
    // Beams extend by their 2k most likely tokens; nothing is drawn. The
    // logprobs are the processed logits' (as vLLM v0): a constrained
    // beam's candidates are only tokens its grammar allows, and before
    // min_tokens none is EOS.
    options->set_temperature(0.0f);
    options->set_num_logprobs(std::max(sampling.num_logprobs, 2 * sampling.best_of));
    options->set_processed_logprobs(true);
  }
}

GeneratedToken ToGeneratedToken(const wv1::PromptTokenLogprob& scored) {
  GeneratedToken token{scored.token_id(), scored.logprob(), {}};
  for (const wv1::TokenLogprob& top : scored.top()) {
    token.top.push_back(TopLogprob{top.token_id(), top.logprob()});
  }
  return token;
}

}  // namespace

namespace {

// SetLogitsProcessing but for the penalties' prompt tokens and output
// counts (AddPenaltyCounts): what a penalty row compares before it sends a
// SamplingDelta instead of them.
void SetLightLogitsProcessing(const SequenceGroup& group, const Sequence& seq,
                              absl::Span<const int32_t> eos_token_ids,
                              wv1::SamplingOptions* options) {
  const SamplingOptions& sampling = group.sampling();
  options->set_presence_penalty(sampling.presence_penalty);
  options->set_frequency_penalty(sampling.frequency_penalty);
  options->set_repetition_penalty(sampling.repetition_penalty);
  options->set_min_p(sampling.min_p);
  for (const auto& [token, bias] : sampling.logit_bias) {
    options->add_logit_bias_token_ids(token);
    options->add_logit_bias_values(bias);
  }
  for (int32_t id : sampling.allowed_token_ids) options->add_allowed_token_ids(id);
  SetBannedTokens(group, seq, eos_token_ids, options);
}

// The penalties' prompt tokens and output counts (the placeholder left out:
// the worker counts it).
void AddPenaltyCounts(const SequenceGroup& group, const Sequence& seq,
                      wv1::SamplingOptions* options) {
  if (!group.sampling().has_penalties()) return;
  options->mutable_prompt_token_ids()->Add(group.distinct_prompt_tokens().begin(),
                                           group.distinct_prompt_tokens().end());
  options->mutable_output_token_ids()->Reserve(seq.output_token_counts().size());
  options->mutable_output_token_counts()->Reserve(seq.output_token_counts().size());
  for (const auto& [token, count] : seq.output_token_counts()) {
    options->add_output_token_ids(token);
    options->add_output_token_counts(count);
  }
}

// Output tokens the server knows for `seq`: its placeholder's is not.
int CountedOutputs(const Sequence& seq) {
  return seq.num_output_tokens() - (seq.has_pending_token() ? 1 : 0);
}

// Sends a penalty row's options as a SamplingDelta when `deltas` allow it
// (GrowsPenaltyRow), else adds its prompt tokens and counts to `options`.
void SendPenaltyRow(const SequenceGroup& group, const Sequence& seq, SamplingDeltas* deltas,
                    wv1::SequenceStep* step) {
  wv1::SamplingOptions* options = step->mutable_sampling();
  const int counted = CountedOutputs(seq);
  int counted_before = 0;
  const PenaltySource source{&group.distinct_prompt_tokens(), counted};
  if (deltas == nullptr || !deltas->GrowsPenaltyRow(seq.seq_id(), *options, source,
                                                    &counted_before)) {
    AddPenaltyCounts(group, seq, options);
    return;
  }
  wv1::SamplingDelta* delta = step->mutable_sampling_delta();
  delta->mutable_banned_token_ids()->Swap(options->mutable_banned_token_ids());
  for (int i = counted_before; i < counted; ++i) {
    delta->add_appended_output_token_ids(seq.output()[i].token_id);
  }
  step->clear_sampling();
}

}  // namespace

void SetLogitsProcessing(const SequenceGroup& group, const Sequence& seq,
                         absl::Span<const int32_t> eos_token_ids, wv1::SamplingOptions* options) {
  SetLightLogitsProcessing(group, seq, eos_token_ids, options);
  AddPenaltyCounts(group, seq, options);
}

wv1::StepPlan BuildStepPlan(int64_t step_id, const SchedulerOutput& output,
                            const BlockManager& block_manager,
                            absl::Span<const int32_t> eos_token_ids) {
  wv1::StepPlan plan;
  BuildStepPlanInto(step_id, output, block_manager, eos_token_ids, &plan);
  return plan;
}

void BuildStepPlanInto(int64_t step_id, const SchedulerOutput& output,
                       const BlockManager& block_manager, absl::Span<const int32_t> eos_token_ids,
                       wv1::StepPlan* plan_out, BlockTableDeltas* table_deltas,
                       SamplingDeltas* sampling_deltas) {
  wv1::StepPlan& plan = *plan_out;
  plan.set_step_id(step_id);
  if (table_deltas != nullptr) table_deltas->BeginPlan(step_id);
  if (sampling_deltas != nullptr) sampling_deltas->BeginPlan(step_id);
  plan.mutable_sequences()->Reserve(static_cast<int>(output.scheduled.size()));
  for (const ScheduledSequence& entry : output.scheduled) {
    const Sequence& seq = *entry.seq;
    wv1::SequenceStep* step = plan.add_sequences();
    step->set_seq_id(seq.seq_id());
    step->mutable_token_ids()->Reserve(entry.num_tokens);
    for (int i = entry.start_position; i < entry.start_position + entry.num_tokens; ++i) {
      step->add_token_ids(seq.token_at(i));
    }
    step->set_start_position(entry.start_position);
    const std::vector<int>& table = block_manager.GetBlockTable(seq.seq_id());
    const int table_start =
        table_deltas == nullptr ? 0 : table_deltas->StartFor(seq.seq_id(), table);
    if (table_start > 0) step->set_block_table_start(table_start);
    step->mutable_block_table()->Add(table.begin() + table_start, table.end());
    step->set_do_sample(entry.do_sample);
    wv1::SamplingOptions* options = step->mutable_sampling();
    SetStepDrawOptions(*entry.group, seq, options);
    step->set_sample_index(seq.num_output_tokens());
    SetPromptLogprobTargets(entry, step);
    const bool penalty_row = entry.do_sample && entry.group->sampling().has_penalties();
    if (entry.do_sample) {
      SetLightLogitsProcessing(*entry.group, seq, eos_token_ids, options);
      if (IsConstrained(*entry.group)) {
        // The bans fold into the mask that follows (BuildStepMasks).
        options->clear_banned_token_ids();
        step->set_token_mask_follows(true);
      } else if (BadWordBanFollows(*entry.group, seq)) {
        // The multi-token bad words' ban would read the placeholder: it
        // follows in the step's masks; the other bans stay here.
        options->clear_banned_token_ids();
        AddBadWordBans(*entry.group, seq, /*single_token=*/true, /*multi_token=*/false, options);
        AddMinTokensBans(*entry.group, seq, eos_token_ids, options);
        step->set_token_mask_follows(true);
      }
    }
    if (penalty_row) {
      SendPenaltyRow(*entry.group, seq, sampling_deltas, step);
    } else if (sampling_deltas != nullptr && sampling_deltas->Unchanged(seq.seq_id(), *options)) {
      step->clear_sampling();
      step->set_sampling_unchanged(true);
    }
  }
  AddMoves(output.blocks_to_swap_in, plan.mutable_swap_in());
  AddMoves(output.blocks_to_swap_out, plan.mutable_swap_out());
  AddMoves(output.blocks_to_copy, plan.mutable_copy());
}

wv1::StepMasks BuildStepMasks(const wv1::StepPlan& plan, const SchedulerOutput& output,
                              absl::Span<const int32_t> eos_token_ids, int vocab_size) {
  wv1::StepMasks masks;
  masks.set_step_id(plan.step_id());
  for (int i = 0; i < plan.sequences_size(); ++i) {
    if (!plan.sequences(i).token_mask_follows()) continue;
    const ScheduledSequence& entry = output.scheduled[i];
    const auto& drafts = plan.sequences(i).draft_token_ids();
    if (IsFinished(entry.seq->status())) {
      // Under overlap, a late stop (EOS, a stop token or string in the step
      // before): the row's token is dropped unread, but the worker waits
      // for its masks; empty ones draw freely.
      for (int row = 0; row <= drafts.size(); ++row) {
        masks.add_rows()->set_seq_id(entry.seq->seq_id());
      }
      continue;
    }
    if (!IsConstrained(*entry.group)) {  // Only its bad words' ban followed.
      wv1::RowTokenMask* row = masks.add_rows();
      row->set_seq_id(entry.seq->seq_id());
      row->set_token_mask(BanMaskAfterOutput(*entry.group, *entry.seq, vocab_size));
      continue;
    }
    wv1::SamplingOptions bans;
    SetBannedTokens(*entry.group, *entry.seq, eos_token_ids, &bans);
    // One row per verified position: the drafts' masks follow the first.
    for (std::string& mask :
         NextTokenMasks(*entry.group, *entry.seq, drafts, eos_token_ids, bans.banned_token_ids())) {
      wv1::RowTokenMask* row = masks.add_rows();
      row->set_seq_id(entry.seq->seq_id());
      row->set_token_mask(std::move(mask));
    }
  }
  return masks;
}

absl::StatusOr<std::vector<GeneratedToken>> ExtractSampledTokens(const wv1::StepResult& result,
                                                                 const SchedulerOutput& output) {
  std::vector<GeneratedToken> tokens;
  tokens.reserve(result.tokens_size());
  int next = 0;
  for (const ScheduledSequence& entry : output.scheduled) {
    if (!entry.do_sample) continue;
    if (next >= result.tokens_size()) {
      return absl::InternalError(absl::StrCat("step ", result.step_id(), " returned ",
                                              result.tokens_size(), " tokens, expected more"));
    }
    const wv1::SampledToken& sampled = result.tokens(next++);
    if (sampled.seq_id() != entry.seq->seq_id()) {
      return absl::InternalError(absl::StrCat("step ", result.step_id(), " token ", next - 1,
                                              " is for sequence ", sampled.seq_id(), ", expected ",
                                              entry.seq->seq_id()));
    }
    GeneratedToken token{sampled.token_id(), sampled.logprob(), {}};
    for (const wv1::TokenLogprob& top : sampled.top()) {
      token.top.push_back(TopLogprob{top.token_id(), top.logprob()});
    }
    tokens.push_back(std::move(token));
  }
  if (next != result.tokens_size()) {
    return absl::InternalError(absl::StrCat("step ", result.step_id(), " returned ",
                                            result.tokens_size(), " tokens, expected ", next));
  }
  return tokens;
}

absl::StatusOr<std::vector<StepPromptLogprobs>> ExtractPromptLogprobs(
    const wv1::StepResult& result, const wv1::StepPlan& plan, const SchedulerOutput& output) {
  std::vector<StepPromptLogprobs> extracted;
  int next = 0;
  for (int i = 0; i < plan.sequences_size(); ++i) {
    const wv1::SequenceStep& step = plan.sequences(i);
    if (step.prompt_logprob_token_ids_size() == 0) continue;
    if (next >= result.prompt_logprobs_size() ||
        result.prompt_logprobs(next).seq_id() != step.seq_id() ||
        result.prompt_logprobs(next).tokens_size() != step.prompt_logprob_token_ids_size()) {
      return absl::InternalError(absl::StrCat("step ", result.step_id(),
                                              ": prompt logprobs do not match the plan at sequence ",
                                              step.seq_id()));
    }
    StepPromptLogprobs entry{output.scheduled[i].group, step.start_position() + 1, {}};
    for (const wv1::PromptTokenLogprob& scored : result.prompt_logprobs(next++).tokens()) {
      entry.entries.push_back(ToGeneratedToken(scored));
    }
    extracted.push_back(std::move(entry));
  }
  if (next != result.prompt_logprobs_size()) {
    return absl::InternalError(absl::StrCat("step ", result.step_id(), " returned ",
                                            result.prompt_logprobs_size(),
                                            " prompt logprob entries, expected ", next));
  }
  return extracted;
}

google::protobuf::ArenaOptions StepArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 16 << 10;
  options.max_block_size = 1 << 20;
  return options;
}

}  // namespace pagoda::scheduler
