#include "scheduler/engine/speculation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "scheduler/engine/constraint_mask.h"
#include "scheduler/spec/draft_budget.h"
#include "scheduler/spec/ngram_proposer.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

// A draft the workers' draft model proposes (method draft_model): the
// server knows only how many it asked for.
constexpr int32_t kWorkerDraft = -1;

// A running sequence whose next step is a decode of its last token (not a
// prompt chunk, nor the first token, which forks parallel samples).
bool DecodesNext(const Sequence& seq) {
  return seq.num_output_tokens() > 0 && seq.num_computed_tokens() == seq.length() - 1;
}

std::vector<int32_t> AllTokens(const Sequence& seq) {
  std::vector<int32_t> tokens;
  tokens.reserve(seq.length());
  tokens.insert(tokens.end(), seq.prompt_token_ids().begin(), seq.prompt_token_ids().end());
  for (const GeneratedToken& token : seq.output()) tokens.push_back(token.token_id);
  return tokens;
}

absl::Status Mismatch(const wv1::StepResult& result, int64_t seq_id, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("step ", result.step_id(), " sequence ", seq_id, ": accepted drafts ", what));
}

// The accepted drafts of one SampledToken, checked against those sent.
absl::StatusOr<std::vector<GeneratedToken>> AcceptedOf(const wv1::StepResult& result,
                                                       const wv1::SampledToken& sampled,
                                                       const std::vector<int32_t>& sent) {
  const int accepted = sampled.accepted_draft_ids_size();
  if (accepted > static_cast<int>(sent.size())) {
    return Mismatch(result, sampled.seq_id(), "outnumber the drafts sent");
  }
  if (sampled.accepted_draft_logprobs_size() != accepted ||
      sampled.accepted_draft_top_size() != accepted * sampled.top_size()) {
    return Mismatch(result, sampled.seq_id(), "and their logprobs differ in number");
  }
  std::vector<GeneratedToken> tokens;
  tokens.reserve(accepted);
  for (int j = 0; j < accepted; ++j) {
    const int32_t id = sampled.accepted_draft_ids(j);
    if (sent[j] == kWorkerDraft ? id < 0 : id != sent[j]) {
      return Mismatch(result, sampled.seq_id(), "differ from the drafts sent");
    }
    GeneratedToken token{id, sampled.accepted_draft_logprobs(j), {}};
    for (int t = j * sampled.top_size(); t < (j + 1) * sampled.top_size(); ++t) {
      const wv1::TokenLogprob& top = sampled.accepted_draft_top(t);
      token.top.push_back(TopLogprob{top.token_id(), top.logprob()});
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace

Speculator::Speculator(const SpeculativeConfig& config, int max_model_len,
                       int max_num_batched_tokens, std::vector<int32_t> eos_token_ids)
    : config_(config),
      max_model_len_(max_model_len),
      max_num_batched_tokens_(max_num_batched_tokens),
      eos_token_ids_(std::move(eos_token_ids)) {
  CHECK(config_.method == SpeculativeMethod::kNgram ||
        config_.method == SpeculativeMethod::kDraftModel ||
        config_.method == SpeculativeMethod::kEagle || config_.method == SpeculativeMethod::kEagle3)
      << "unknown speculative method";
  totals_.accepted_per_pos.assign(config_.num_speculative_tokens, 0);
}

void Speculator::Propose(Scheduler& scheduler) {
  proposed_.clear();
  with_slots_.clear();
  int running = 0;
  int decodes = 0;
  scheduler.ForEachRunningSequence([&](SequenceGroup&, Sequence& seq) {
    ++running;
    if (DecodesNext(seq)) ++decodes;
  });
  // Each decode takes one token of the budget; drafts share what is left.
  int token_room = max_num_batched_tokens_ - decodes;
  scheduler.ForEachRunningSequence([&](SequenceGroup& group, Sequence& seq) {
    if (!DecodesNext(seq) || token_room <= 0) return;
    std::vector<int32_t> drafts = DraftsFor(group, seq, running, token_room);
    if (!drafts.empty() && IsConstrained(group)) {
      drafts.resize(GrammarValidDrafts(group, seq, eos_token_ids_, drafts));
    }
    if (drafts.empty()) return;
    token_room -= static_cast<int>(drafts.size());
    seq.set_num_lookahead_slots(static_cast<int>(drafts.size()));
    with_slots_.push_back(&seq);
    proposed_[seq.seq_id()] = std::move(drafts);
  });
}

std::vector<int32_t> Speculator::DraftsFor(const SequenceGroup& group, const Sequence& seq,
                                           int running_sequences, int token_room) const {
  const SamplingOptions& sampling = group.sampling();
  DraftRequest request;
  request.num_speculative_tokens = std::min(config_.num_speculative_tokens, token_room);
  request.running_sequences = running_sequences;
  request.disable_by_batch_size = config_.disable_by_batch_size;
  request.context_tokens = seq.length();
  request.output_tokens = seq.num_output_tokens();
  request.max_tokens = group.stopping().max_tokens;
  request.min_tokens = group.stopping().min_tokens;
  request.max_model_len = max_model_len_;
  // The server follows a grammar through the drafts it proposes, not
  // through those the workers' draft model or EAGLE head proposes.
  request.constrained = IsConstrained(group) && config_.method != SpeculativeMethod::kNgram;
  request.bad_words = !sampling.bad_words_token_ids.empty();
  request.beam_search = sampling.use_beam_search;
  const int budget = DraftBudget(request);
  if (budget == 0) return {};
  // The workers' draft model or EAGLE head proposes them in the step itself.
  if (config_.method != SpeculativeMethod::kNgram) {
    return std::vector<int32_t>(budget, kWorkerDraft);
  }
  return ProposeNgramDrafts(
      AllTokens(seq),
      NgramLookup{config_.prompt_lookup_min, config_.prompt_lookup_max, budget, max_model_len_});
}

void Speculator::TakeScheduled(const SchedulerOutput& output) {
  scheduled_drafts_.assign(output.scheduled.size(), {});
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledSequence& entry = output.scheduled[i];
    if (entry.num_lookahead_slots == 0) continue;
    auto it = proposed_.find(entry.seq->seq_id());
    CHECK(it != proposed_.end() && static_cast<int>(it->second.size()) == entry.num_lookahead_slots)
        << "sequence " << entry.seq->seq_id() << " scheduled with lookahead slots but no drafts";
    scheduled_drafts_[i] = std::move(it->second);
  }
  // Every sequence Propose touched is still owned by the scheduler or by
  // output.ignored: nothing is freed inside Schedule().
  for (Sequence* seq : with_slots_) seq->set_num_lookahead_slots(0);
  with_slots_.clear();
  proposed_.clear();
}

void Speculator::AttachDrafts(const SchedulerOutput& output, wv1::StepPlan& plan) const {
  CHECK_EQ(plan.sequences_size(), static_cast<int>(output.scheduled.size()));
  for (size_t i = 0; i < scheduled_drafts_.size(); ++i) {
    const std::vector<int32_t>& drafts = scheduled_drafts_[i];
    if (drafts.empty()) continue;
    wv1::SequenceStep* step = plan.mutable_sequences(static_cast<int>(i));
    if (drafts.front() == kWorkerDraft) {
      step->set_num_draft_proposals(static_cast<int>(drafts.size()));
    } else {
      step->mutable_draft_token_ids()->Add(drafts.begin(), drafts.end());
    }
  }
}

absl::StatusOr<std::vector<std::vector<GeneratedToken>>> Speculator::ExtractAccepted(
    const wv1::StepResult& result, const SchedulerOutput& output) {
  std::vector<std::vector<GeneratedToken>> accepted;
  int next = 0;
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    if (!output.scheduled[i].do_sample) continue;
    if (next >= result.tokens_size()) break;  // ExtractSampledTokens reports it.
    const wv1::SampledToken& sampled = result.tokens(next++);
    const std::vector<int32_t>& sent = scheduled_drafts_.at(i);
    absl::StatusOr<std::vector<GeneratedToken>> tokens = AcceptedOf(result, sampled, sent);
    if (!tokens.ok()) return tokens.status();
    accepted.push_back(*std::move(tokens));
  }
  // Counted once the whole answer is known to fit.
  for (size_t i = 0, sample = 0; i < output.scheduled.size(); ++i) {
    if (!output.scheduled[i].do_sample || sample >= accepted.size()) continue;
    const int sent = static_cast<int>(scheduled_drafts_[i].size());
    if (sent > 0) Count(sent, static_cast<int>(accepted[sample].size()));
    ++sample;
  }
  return accepted;
}

void Speculator::Count(int num_drafts, int num_accepted) {
  totals_.num_drafts += 1;
  totals_.num_draft_tokens += num_drafts;
  totals_.num_accepted_tokens += num_accepted;
  for (int j = 0; j < num_accepted && j < static_cast<int>(totals_.accepted_per_pos.size()); ++j) {
    totals_.accepted_per_pos[j] += 1;
  }
}

void Speculator::ReleaseRejectedSlots(const SchedulerOutput& output, BlockManager& blocks) const {
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    if (output.scheduled[i].num_lookahead_slots == 0) continue;
    blocks.TrimToLength(*output.scheduled[i].seq);
  }
}

}  // namespace pagoda::scheduler
