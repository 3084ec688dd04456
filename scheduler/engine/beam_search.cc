#include "scheduler/engine/beam_search.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/container/flat_hash_map.h"

namespace pagoda::scheduler {
namespace {

struct Candidate {
  Sequence* parent;
  int32_t token_id;
  float logprob;
  double cumulative;
  const GeneratedToken* sampled;  // The parent's sample (its top list).
};

// The token a candidate appends: its logprob and the alternatives the
// client asked for (the worker returned 2k).
GeneratedToken TokenOf(const SequenceGroup& group, const Candidate& candidate) {
  GeneratedToken token{candidate.token_id, candidate.logprob, {}};
  const int keep =
      std::min<int>(group.sampling().num_logprobs, static_cast<int>(candidate.sampled->top.size()));
  token.top.assign(candidate.sampled->top.begin(), candidate.sampled->top.begin() + keep);
  return token;
}

std::vector<Sequence*> WithStatus(const SequenceGroup& group, bool (*pick)(SequenceStatus)) {
  std::vector<Sequence*> out;
  for (const auto& seq : group.seqs()) {
    if (pick(seq->status())) out.push_back(seq.get());
  }
  return out;
}

bool IsHypothesis(SequenceStatus s) {
  return s == SequenceStatus::kFinishedStopped || s == SequenceStatus::kFinishedLength;
}
bool IsRunning(SequenceStatus s) { return s == SequenceStatus::kRunning; }

// Keeps the best `width` finished hypotheses; prunes the others. Returns
// the kept ones, best first.
std::vector<Sequence*> KeepBestFinished(const SequenceGroup& group, int width) {
  std::vector<Sequence*> finished = WithStatus(group, &IsHypothesis);
  std::stable_sort(finished.begin(), finished.end(), [&](const Sequence* a, const Sequence* b) {
    return BeamScore(group, *a) > BeamScore(group, *b);
  });
  for (size_t i = width; i < finished.size(); ++i) {
    finished[i]->set_status(SequenceStatus::kFinishedPruned);
  }
  if (static_cast<int>(finished.size()) > width) finished.resize(width);
  return finished;
}

void Prune(Sequence* seq, Scheduler& scheduler) {
  seq->set_status(SequenceStatus::kFinishedPruned);
  scheduler.FreeSequence(seq);
}

using BeamSamples = absl::Span<const std::pair<Sequence*, GeneratedToken>>;
// The candidates each continuing beam extends by, in rank order.
using ContinuingBeams = absl::flat_hash_map<Sequence*, std::vector<const Candidate*>>;

// Every beam's top tokens as extensions, the best 2 x `width` by cumulative
// logprob first: even if up to `width` of them end the search as finished
// hypotheses, `width` remain to continue. A token at -inf is no extension:
// the beam's processing masked it (its grammar, or EOS before min_tokens),
// and a top list holds such tokens only when fewer are allowed.
std::vector<Candidate> BestCandidates(BeamSamples samples, int width) {
  std::vector<Candidate> candidates;
  for (const auto& [beam, sampled] : samples) {
    for (const TopLogprob& top : sampled.top) {
      if (!std::isfinite(top.logprob)) continue;
      candidates.push_back(Candidate{beam, top.token_id, top.logprob,
                                     beam->cumulative_logprob() + top.logprob, &sampled});
    }
  }
  // Best first; ties by beam order, then token id, so the search is deterministic.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     return std::make_tuple(b.cumulative, a.parent->index_in_group(), a.token_id) <
                            std::make_tuple(a.cumulative, b.parent->index_in_group(), b.token_id);
                   });
  if (static_cast<int>(candidates.size()) > 2 * width) candidates.resize(2 * width);
  return candidates;
}

// Candidates that end in a stop token become finished hypotheses at once;
// the best `width` others continue. Returns the continuing ones by parent.
ContinuingBeams FinishOrContinue(SequenceGroup& group, const std::vector<Candidate>& candidates,
                                 const std::vector<int32_t>& eos_token_ids, int width,
                                 Scheduler& scheduler) {
  // Finished hypotheses need no blocks: a plain copy of the parent.
  ContinuingBeams continuing;
  int num_continuing = 0;
  for (const Candidate& candidate : candidates) {
    Sequence& parent = *candidate.parent;
    if (group.stopping().StopsAt(eos_token_ids, parent.num_output_tokens() + 1,
                                 candidate.token_id)) {
      Sequence* done = group.AddForkedSequence(parent, scheduler.NewSeqId());
      done->AppendToken(TokenOf(group, candidate));
      done->set_status(SequenceStatus::kFinishedStopped);
    } else if (num_continuing < width) {
      continuing[&parent].push_back(&candidate);
      ++num_continuing;
    }
  }
  return continuing;
}

// Appends each continuing candidate to its beam (forked once per extra
// candidate), prunes the beams nobody extends, and finishes those that
// reach max_tokens or `max_model_len`.
void ExtendBeams(SequenceGroup& group, BeamSamples samples, const ContinuingBeams& continuing,
                 int max_model_len, Scheduler& scheduler) {
  // Fork before appending: a child takes the parent's tokens so far.
  for (const auto& [beam, unused] : samples) {
    auto it = continuing.find(beam);
    if (it == continuing.end()) {
      Prune(beam, scheduler);
      continue;
    }
    std::vector<Sequence*> targets = {beam};
    for (size_t i = 1; i < it->second.size(); ++i) {
      targets.push_back(scheduler.ForkSequence(group, *beam));
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      targets[i]->AppendToken(TokenOf(group, *it->second[i]));
      if (targets[i]->num_output_tokens() >= group.stopping().max_tokens ||
          targets[i]->length() >= max_model_len) {
        targets[i]->set_status(SequenceStatus::kFinishedLength);
        scheduler.FreeSequence(targets[i]);
      }
    }
  }
}

// Keeps the best `width` hypotheses and prunes every running beam once the
// search is over: `width` hypotheses and early_stopping, or no running beam
// that could still beat the worst kept one.
void EndSearchIfDone(SequenceGroup& group, int width, Scheduler& scheduler) {
  const std::vector<Sequence*> finished = KeepBestFinished(group, width);
  std::vector<Sequence*> running = WithStatus(group, &IsRunning);
  if (static_cast<int>(finished.size()) < width || running.empty()) return;
  bool done = group.sampling().early_stopping;
  if (!done) {
    double best_running = -INFINITY;
    for (const Sequence* beam : running)
      best_running = std::max(best_running, BeamScore(group, *beam));
    done = best_running <= BeamScore(group, *finished.back());
  }
  if (done) {
    for (Sequence* beam : running) Prune(beam, scheduler);
  }
}

}  // namespace

double BeamScore(const SequenceGroup& group, const Sequence& seq) {
  int length = seq.length();
  if (seq.status() == SequenceStatus::kFinishedStopped) --length;  // Ended by its stop token.
  return seq.cumulative_logprob() /
         std::pow(static_cast<double>(length), group.sampling().length_penalty);
}

void AdvanceBeams(SequenceGroup& group, BeamSamples samples,
                  const std::vector<int32_t>& eos_token_ids, int max_model_len,
                  Scheduler& scheduler) {
  const int width = group.sampling().best_of;
  // `continuing` points into `candidates`.
  const std::vector<Candidate> candidates = BestCandidates(samples, width);
  const ContinuingBeams continuing =
      FinishOrContinue(group, candidates, eos_token_ids, width, scheduler);
  ExtendBeams(group, samples, continuing, max_model_len, scheduler);
  EndSearchIfDone(group, width, scheduler);
}

}  // namespace pagoda::scheduler
