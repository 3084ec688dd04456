#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "glog/logging.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {
namespace {

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

int IndexInGroup(const SequenceGroup& group, const Sequence* seq) {
  for (int i = 0; i < static_cast<int>(group.seqs().size()); ++i) {
    if (group.seqs()[i].get() == seq) return i;
  }
  LOG(FATAL) << "sequence " << seq->seq_id() << " is not in group " << group.request_id();
}

}  // namespace

OutputProcessor::OutputProcessor(std::vector<int32_t> eos_token_ids, int max_model_len)
    : eos_token_ids_(std::move(eos_token_ids)), max_model_len_(max_model_len) {}

std::vector<RequestDelta> OutputProcessor::Process(const SchedulerOutput& output,
                                                   const std::vector<GeneratedToken>& sampled) {
  std::vector<RequestDelta> deltas;
  absl::flat_hash_map<const SequenceGroup*, int> delta_of_group;
  size_t next_sample = 0;
  for (const ScheduledSequence& entry : output.scheduled) {
    Sequence& seq = *entry.seq;
    seq.set_num_computed_tokens(entry.start_position + entry.num_tokens);
    if (!entry.do_sample) continue;
    CHECK_LT(next_sample, sampled.size()) << "fewer sampled tokens than sampling sequences";
    const GeneratedToken& token = sampled[next_sample++];
    seq.AppendToken(token);
    SequenceGroup& group = *entry.group;
    if (group.first_token_time == absl::InfinitePast()) group.first_token_time = absl::Now();

    // Stop checks, in vLLM's order. Before min_tokens only the length limits
    // can end a sequence (EOS and stop ids are masked).
    const StoppingOptions& stopping = group.stopping();
    const bool may_stop_on_token = seq.num_output_tokens() >= stopping.min_tokens;
    if (may_stop_on_token && !stopping.ignore_eos && Contains(eos_token_ids_, token.token_id)) {
      seq.set_status(SequenceStatus::kFinishedStopped);
    } else if (may_stop_on_token && Contains(stopping.stop_token_ids, token.token_id)) {
      seq.set_status(SequenceStatus::kFinishedStopped);
    } else if (seq.length() >= max_model_len_) {
      seq.set_status(SequenceStatus::kFinishedLength);
    } else if (seq.num_output_tokens() >= stopping.max_tokens) {
      seq.set_status(SequenceStatus::kFinishedLength);
    }

    auto [it, inserted] = delta_of_group.try_emplace(&group, static_cast<int>(deltas.size()));
    if (inserted) deltas.push_back(RequestDelta{group.request_id(), {}, false});
    deltas[it->second].seqs.push_back(
        RequestDelta::SeqDelta{IndexInGroup(group, &seq), {token}, seq.status()});
  }
  CHECK_EQ(next_sample, sampled.size()) << "more sampled tokens than sampling sequences";
  for (auto& [group, index] : delta_of_group) deltas[index].finished = group->IsFinished();
  return deltas;
}

}  // namespace pagoda::scheduler
