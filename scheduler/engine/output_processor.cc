#include "scheduler/engine/output_processor.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "glog/logging.h"
#include "scheduler/engine/beam_search.h"

namespace pagoda::scheduler {
namespace {

double CumulativeLogprob(const SequenceGroup&, const Sequence& seq) {
  return seq.cumulative_logprob();
}

// Sent as they come: one sequence, or every sample is returned.
bool Streams(const SamplingOptions& sampling) {
  return !sampling.use_beam_search && sampling.best_of <= sampling.n;
}

// A delta of `group` with nothing in it yet.
RequestDelta NewDelta(const SequenceGroup& group, bool finished) {
  RequestDelta delta{group.request_id(), {}, {}, finished};
  delta.num_cached_tokens = group.num_cached_prompt_tokens();
  return delta;
}

}  // namespace

RequestDelta FinalDelta(const SequenceGroup& group,
                        double (*score)(const SequenceGroup&, const Sequence&)) {
  std::vector<const Sequence*> candidates;
  for (const auto& seq : group.seqs()) {
    if (seq->status() != SequenceStatus::kFinishedPruned) candidates.push_back(seq.get());
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](const Sequence* a, const Sequence* b) {
    return score(group, *a) > score(group, *b);
  });
  RequestDelta delta = NewDelta(group, true);
  const int n = std::min<int>(group.sampling().n, static_cast<int>(candidates.size()));
  for (int i = 0; i < n; ++i) {
    delta.seqs.push_back(
        RequestDelta::SeqDelta{i,
                               {candidates[i]->output().begin(), candidates[i]->output().end()},
                               candidates[i]->status()});
  }
  return delta;
}

std::optional<RequestDelta> CutShortDelta(SequenceGroup& group) {
  const bool generated = std::any_of(group.seqs().begin(), group.seqs().end(),
                                     [](const auto& seq) { return seq->num_output_tokens() > 0; });
  if (!generated) return std::nullopt;
  RequestDelta delta = NewDelta(group, true);
  for (const auto& seq : group.seqs()) {
    if (seq->status() != SequenceStatus::kFinishedIgnored) continue;
    seq->set_status(SequenceStatus::kFinishedLength);
    delta.seqs.push_back(RequestDelta::SeqDelta{seq->index_in_group(), {}, seq->status()});
  }
  if (!Streams(group.sampling())) {
    delta = FinalDelta(group, group.sampling().use_beam_search ? &BeamScore : &CumulativeLogprob);
  }
  return delta;
}

OutputProcessor::OutputProcessor(std::vector<int32_t> eos_token_ids, int max_model_len,
                                 Scheduler* scheduler)
    : eos_token_ids_(std::move(eos_token_ids)),
      max_model_len_(max_model_len),
      scheduler_(scheduler) {
  CHECK(scheduler_ != nullptr);
}

std::vector<RequestDelta> OutputProcessor::Process(
    const SchedulerOutput& output, const std::vector<GeneratedToken>& sampled,
    const std::vector<std::vector<GeneratedToken>>* accepted) {
  CHECK(accepted == nullptr || accepted->size() == sampled.size());
  DraftRuns runs;
  // Samples by group, groups in the order they first appear in the step.
  // A group's sequences are usually adjacent: the index is consulted only
  // when a new run of entries starts.
  std::vector<std::pair<SequenceGroup*, Samples>> groups;
  groups.reserve(output.scheduled.size());
  absl::flat_hash_map<SequenceGroup*, size_t> index_of;
  index_of.reserve(output.scheduled.size());
  size_t next_sample = 0;
  size_t current = 0;
  for (const ScheduledSequence& entry : output.scheduled) {
    entry.seq->set_num_computed_tokens(entry.start_position + entry.num_tokens);
    if (!entry.do_sample) continue;
    CHECK_LT(next_sample, sampled.size()) << "fewer sampled tokens than sampling sequences";
    if (groups.empty() || groups[current].first != entry.group) {
      auto [it, inserted] = index_of.try_emplace(entry.group, groups.size());
      if (inserted) groups.emplace_back(entry.group, Samples());
      current = it->second;
    }
    if (accepted != nullptr && !(*accepted)[next_sample].empty()) {
      runs[entry.seq] = &(*accepted)[next_sample];
    }
    groups[current].second.emplace_back(entry.seq, sampled[next_sample++]);
  }
  CHECK_EQ(next_sample, sampled.size()) << "more sampled tokens than sampling sequences";

  std::vector<RequestDelta> deltas;
  deltas.reserve(groups.size());
  for (auto& [group, samples] : groups) {
    group->MarkProgress();
    if (group->first_token_time == absl::InfinitePast()) group->first_token_time = absl::Now();
    RequestDelta delta = NewDelta(*group, false);
    if (group->sampling().use_beam_search) {
      AdvanceBeams(*group, samples, eos_token_ids_, max_model_len_, *scheduler_);
    } else {
      ProcessSamples(*group, samples, runs, delta);
    }
    if (group->IsFinished() && !Streams(group->sampling())) {
      delta =
          FinalDelta(*group, group->sampling().use_beam_search ? &BeamScore : &CumulativeLogprob);
    }
    delta.finished = group->IsFinished();
    if (!delta.seqs.empty() || delta.finished) deltas.push_back(std::move(delta));
  }
  AttachPromptLogprobs(output, deltas);
  return deltas;
}

void OutputProcessor::AttachPromptLogprobs(const SchedulerOutput& output,
                                           std::vector<RequestDelta>& deltas) {
  for (const ScheduledSequence& entry : output.scheduled) {
    SequenceGroup& group = *entry.group;
    if (!group.sampling().wants_prompt_logprobs()) continue;
    std::vector<GeneratedToken> fresh = group.prompt_logprobs().TakeNew();
    if (fresh.empty()) continue;
    auto it = std::find_if(deltas.begin(), deltas.end(), [&](const RequestDelta& delta) {
      return delta.request_id == group.request_id();
    });
    if (it == deltas.end()) {
      deltas.push_back(NewDelta(group, group.IsFinished()));
      it = deltas.end() - 1;
    }
    it->prompt_logprobs = std::move(fresh);
  }
}

void OutputProcessor::ProcessSamples(SequenceGroup& group, const Samples& samples,
                                     const DraftRuns& runs, RequestDelta& delta) {
  for (const auto& [seq, token] : samples) {
    if (seq->index_in_group() == 0 && seq->num_output_tokens() == 0) {
      // First token of the request: the other samples branch off here and
      // draw their own first token next step from the same prompt K/V.
      while (static_cast<int>(group.seqs().size()) < group.sampling().best_of) {
        Sequence* child = scheduler_->ForkSequence(group, *seq);
        child->set_num_computed_tokens(seq->length() - 1);
      }
    }
    const auto run = runs.find(seq);
    absl::InlinedVector<GeneratedToken, 1> appended =
        AppendRun(group, *seq, run == runs.end() ? nullptr : run->second, token);
    if (Streams(group.sampling())) {
      delta.seqs.push_back(
          RequestDelta::SeqDelta{seq->index_in_group(), std::move(appended), seq->status()});
    }
  }
}

absl::InlinedVector<GeneratedToken, 1> OutputProcessor::AppendRun(
    const SequenceGroup& group, Sequence& seq, const std::vector<GeneratedToken>* drafts,
    const GeneratedToken& token) {
  absl::InlinedVector<GeneratedToken, 1> appended;
  // The drafts' K/V was written by this step at the positions they take.
  const int num_drafts = drafts == nullptr ? 0 : static_cast<int>(drafts->size());
  const int verified_end = seq.num_computed_tokens() + num_drafts;
  const int run_length = num_drafts + 1;
  for (int i = 0; i < run_length; ++i) {
    appended.push_back(i + 1 < run_length ? (*drafts)[i] : token);
    seq.AppendToken(appended.back());
    seq.set_status(StopStatus(group, seq));
    if (IsFinished(seq.status())) break;  // Nothing past a stop.
  }
  if (drafts != nullptr) seq.set_num_computed_tokens(std::min(verified_end, seq.length()));
  return appended;
}

SequenceStatus OutputProcessor::StopStatus(const SequenceGroup& group, const Sequence& seq) const {
  // Stop checks, in vLLM's order.
  // seq holds the token already.
  if (group.stopping().StopsAt(eos_token_ids_, seq.num_output_tokens(), seq.last_token())) {
    return SequenceStatus::kFinishedStopped;
  }
  if (seq.length() >= max_model_len_) return SequenceStatus::kFinishedLength;
  if (seq.num_output_tokens() >= group.stopping().max_tokens) {
    return SequenceStatus::kFinishedLength;
  }
  return seq.status();
}

}  // namespace pagoda::scheduler
