#include "scheduler/engine/speculation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/draft_model_positions.h"
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

// The proposals one SampledToken returns for the next step, checked
// against the number asked for.
absl::Status CheckNextDrafts(const wv1::StepResult& result, const wv1::SampledToken& sampled,
                             int asked) {
  if (sampled.next_draft_ids_size() > asked) {
    return absl::InternalError(absl::StrCat("step ", result.step_id(), " sequence ",
                                            sampled.seq_id(),
                                            ": next-step proposals outnumber those asked for"));
  }
  for (int32_t id : sampled.next_draft_ids()) {
    if (id < 0) {
      return absl::InternalError(absl::StrCat("step ", result.step_id(), " sequence ",
                                              sampled.seq_id(), ": a negative next-step proposal"));
    }
  }
  return absl::OkStatus();
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
  step_k_ = SpeculativeTokensFor(config_, running);  // Once a step: the schedule's lookup.
  scheduler.ForEachRunningSequence([&](SequenceGroup& group, Sequence& seq) {
    if (!DecodesNext(seq) || token_room <= 0) return;
    Proposal proposal = ProposalFor(group, seq, running, token_room);
    if (proposal.lookahead() == 0) return;
    token_room -= proposal.lookahead();
    seq.set_num_lookahead_slots(proposal.lookahead());
    with_slots_.push_back(&seq);
    proposed_[seq.seq_id()] = std::move(proposal);
  });
  next_drafts_.clear();  // Proposals for a sequence that did not decode now are stale.
}

int Speculator::BudgetFor(const SequenceGroup& group, const Sequence& seq, int running_sequences,
                          int token_room) const {
  const SamplingOptions& sampling = group.sampling();
  DraftRequest request;
  request.num_speculative_tokens = std::min(step_k_, token_room);
  request.running_sequences = running_sequences;
  request.disable_by_batch_size = config_.disable_by_batch_size;
  request.context_tokens = seq.length();
  request.output_tokens = seq.num_output_tokens();
  request.max_tokens = group.stopping().max_tokens;
  request.min_tokens = group.stopping().min_tokens;
  request.max_model_len = max_model_len_;
  request.draft_max_len = config_.draft_max_len;
  request.bad_words = !sampling.bad_words_token_ids.empty();
  request.beam_search = sampling.use_beam_search;
  return DraftBudget(request);
}

Speculator::Proposal Speculator::ProposalFor(SequenceGroup& group, Sequence& seq,
                                             int running_sequences, int token_room) const {
  const int budget = BudgetFor(group, seq, running_sequences, token_room);
  if (budget == 0) return {};
  if (config_.method == SpeculativeMethod::kNgram) {
    Proposal proposal;
    proposal.drafts = ProposeNgramDrafts(
        AllTokens(seq),
        NgramLookup{config_.prompt_lookup_min, config_.prompt_lookup_max, budget, max_model_len_});
    if (!proposal.drafts.empty() && IsConstrained(group)) {
      proposal.drafts.resize(GrammarValidDrafts(group, seq, eos_token_ids_, proposal.drafts));
    }
    return proposal;
  }
  // The server follows a grammar only through drafts it knows before the
  // step: a constrained sequence's are proposed a step ahead.
  if (IsConstrained(group)) return ProposedAhead(group, seq, budget, token_room);
  // The workers' draft model or EAGLE head proposes them in the step itself.
  return Proposal{std::vector<int32_t>(budget, kWorkerDraft), 0};
}

Speculator::Proposal Speculator::ProposedAhead(SequenceGroup& group, Sequence& seq, int budget,
                                               int token_room) const {
  Proposal proposal;
  auto it = next_drafts_.find(seq.seq_id());
  if (it != next_drafts_.end() && it->second.length == seq.length()) {
    const std::vector<int32_t>& ready = it->second.drafts;
    proposal.drafts.assign(ready.begin(), ready.begin() + std::min<size_t>(ready.size(), budget));
    proposal.drafts.resize(GrammarValidDrafts(group, seq, eos_token_ids_, proposal.drafts));
  }
  // The next step's proposals run at positions up to length - 1 + (drafts
  // accepted) + k: within max_model_len, and only while a later step can
  // still sample a token after this one.
  const int drafts = static_cast<int>(proposal.drafts.size());
  int next = std::min(step_k_, token_room - drafts);
  next = std::min(next, max_model_len_ - seq.length() - drafts);
  next = std::min(next, group.stopping().max_tokens - seq.num_output_tokens() - 2);
  next = std::max(next, 0);
  // They are the next step's drafts: with every draft accepted, after
  // length + drafts + 1 tokens, where a draft model's passes must fit its
  // positions (DraftBudget's rule then), or none.
  if (config_.draft_max_len.has_value() &&
      !DraftPassesFit(seq.length() + drafts + 1, next, *config_.draft_max_len)) {
    next = 0;
  }
  proposal.next = next;
  return proposal;
}

void Speculator::TakeScheduled(const SchedulerOutput& output) {
  scheduled_.assign(output.scheduled.size(), {});
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    const ScheduledSequence& entry = output.scheduled[i];
    if (entry.num_lookahead_slots == 0) continue;
    auto it = proposed_.find(entry.seq->seq_id());
    CHECK(it != proposed_.end() && it->second.lookahead() == entry.num_lookahead_slots)
        << "sequence " << entry.seq->seq_id() << " scheduled with lookahead slots but no drafts";
    scheduled_[i] = std::move(it->second);
  }
  // Every sequence Propose touched is still owned by the scheduler or by
  // output.ignored: nothing is freed inside Schedule().
  for (Sequence* seq : with_slots_) seq->set_num_lookahead_slots(0);
  with_slots_.clear();
  proposed_.clear();
}

void Speculator::AttachDrafts(const SchedulerOutput& output, wv1::StepPlan& plan) const {
  CHECK_EQ(plan.sequences_size(), static_cast<int>(output.scheduled.size()));
  for (size_t i = 0; i < scheduled_.size(); ++i) {
    const Proposal& proposal = scheduled_[i];
    if (proposal.lookahead() == 0) continue;
    wv1::SequenceStep* step = plan.mutable_sequences(static_cast<int>(i));
    const std::vector<int32_t>& drafts = proposal.drafts;
    if (!drafts.empty() && drafts.front() == kWorkerDraft) {
      step->set_num_draft_proposals(static_cast<int>(drafts.size()));
    } else {
      step->mutable_draft_token_ids()->Add(drafts.begin(), drafts.end());
    }
    if (proposal.next > 0) step->set_num_next_draft_proposals(proposal.next);
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
    const Proposal& sent = scheduled_.at(i);
    absl::StatusOr<std::vector<GeneratedToken>> tokens = AcceptedOf(result, sampled, sent.drafts);
    if (!tokens.ok()) return tokens.status();
    if (absl::Status ahead = CheckNextDrafts(result, sampled, sent.next); !ahead.ok()) return ahead;
    accepted.push_back(*std::move(tokens));
  }
  // Counted and kept once the whole answer is known to fit.
  for (size_t i = 0, sample = 0; i < output.scheduled.size(); ++i) {
    if (!output.scheduled[i].do_sample || sample >= accepted.size()) continue;
    const wv1::SampledToken& sampled = result.tokens(static_cast<int>(sample));
    if (sampled.next_draft_ids_size() > 0) {
      // The sequence's length once this step's tokens are appended.
      const int length =
          output.scheduled[i].seq->length() + static_cast<int>(accepted[sample].size()) + 1;
      next_drafts_[output.scheduled[i].seq->seq_id()] =
          NextDrafts{length, {sampled.next_draft_ids().begin(), sampled.next_draft_ids().end()}};
    }
    const int sent = static_cast<int>(scheduled_[i].drafts.size());
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
