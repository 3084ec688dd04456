#include <algorithm>
#include <memory>
#include <random>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/sim/memory_sim.h"

namespace pagoda::scheduler::sim {
namespace {

constexpr int32_t kVocab = 32000;

// The fake worker: a random token for every sampling entry, and for beam
// search 2k random alternatives with descending logprobs.
std::vector<GeneratedToken> FakeSample(const SchedulerOutput& output, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> token(3, kVocab - 1);
  std::exponential_distribution<float> drop(1.0f);
  std::vector<GeneratedToken> sampled;
  for (const ScheduledSequence& entry : output.scheduled) {
    if (!entry.do_sample) continue;
    GeneratedToken generated{token(rng), -drop(rng), {}};
    const SamplingOptions& sampling = entry.group->sampling();
    if (sampling.use_beam_search) {
      float logprob = 0;
      for (int i = 0; i < 2 * sampling.best_of; ++i) {
        logprob -= drop(rng);
        generated.top.push_back(TopLogprob{token(rng), logprob});
      }
    }
    sampled.push_back(std::move(generated));
  }
  return sampled;
}

// Blocks the running sequences hold, counted per sequence (no sharing) and
// distinct (with sharing).
std::pair<int64_t, int64_t> BlocksWithoutAndWithSharing(const SchedulerOutput& output,
                                                        const BlockManager& blocks) {
  int64_t unshared = 0;
  absl::flat_hash_set<int> distinct;
  absl::flat_hash_set<const SequenceGroup*> seen;
  for (const ScheduledSequence& entry : output.scheduled) {
    if (!seen.insert(entry.group).second) continue;
    for (const Sequence* seq : entry.group->SeqsWithStatus(SequenceStatus::kRunning)) {
      const std::vector<int>& table = blocks.GetBlockTable(seq->seq_id());
      unshared += static_cast<int64_t>(table.size());
      distinct.insert(table.begin(), table.end());
    }
  }
  return {unshared, static_cast<int64_t>(distinct.size())};
}

}  // namespace

MemoryStats SimulatePagoda(const std::vector<TraceRequest>& trace, const SimConfig& config,
                           DecodeMode mode, uint64_t seed) {
  SchedulerConfig scheduler_config;
  scheduler_config.block_size = config.block_size;
  scheduler_config.num_gpu_blocks = config.kv_tokens / config.block_size;
  scheduler_config.num_cpu_blocks = scheduler_config.num_gpu_blocks;
  scheduler_config.max_num_seqs = config.max_num_seqs;
  scheduler_config.max_num_batched_tokens = config.max_num_batched_tokens;
  scheduler_config.max_model_len = config.max_model_len;
  scheduler_config.enable_prefix_caching = false;  // Synthetic prompts share nothing.
  scheduler_config.avoid_thrashing = config.avoid_thrashing;
  Scheduler scheduler(scheduler_config);
  OutputProcessor processor({}, config.max_model_len, &scheduler);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(3, kVocab - 1);

  MemoryStats stats;
  size_t next = 0;
  double now = 0;
  double share_sum = 0;
  double batch_sum = 0;
  int64_t unshared_sum = 0;
  int64_t shared_sum = 0;
  const absl::Time epoch = absl::UnixEpoch();
  while (next < trace.size() || scheduler.HasUnfinished()) {
    if (!scheduler.HasUnfinished() && trace[next].arrival_seconds > now) {
      now = trace[next].arrival_seconds;
    }
    for (; next < trace.size() && trace[next].arrival_seconds <= now; ++next) {
      const TraceRequest& request = trace[next];
      std::vector<int32_t> prompt(request.prompt_len);
      for (int32_t& id : prompt) id = token(rng);
      SamplingOptions sampling;
      sampling.temperature = mode.beam_search ? 0.0f : 1.0f;
      sampling.n = sampling.best_of = mode.width;
      sampling.use_beam_search = mode.beam_search;
      StoppingOptions stopping;
      stopping.max_tokens = request.output_len;
      stopping.ignore_eos = true;
      scheduler.AddSequenceGroup(std::make_unique<SequenceGroup>(
          absl::StrCat("r", next), std::move(prompt), static_cast<int64_t>(next), sampling,
          stopping, epoch + absl::Seconds(request.arrival_seconds)));
    }
    SchedulerOutput output = scheduler.Schedule();
    stats.num_preemptions += output.num_preempted;
    if (output.empty()) {
      // Nothing fits now (should not happen: something always runs or waits
      // for an arrival); move time on to avoid spinning.
      CHECK(next < trace.size()) << "simulation wedged";
      now = std::max(now, trace[next].arrival_seconds);
      continue;
    }
    int64_t context = 0;
    int64_t prefill = 0;
    for (const ScheduledSequence& entry : output.scheduled) {
      context += entry.start_position + entry.num_tokens;
      if (entry.num_tokens > 1) prefill += entry.num_tokens;
    }
    processor.Process(output, FakeSample(output, rng));
    scheduler.CommitComputedBlocks(output);
    const Scheduler::KvSlotUsage usage = scheduler.ComputeKvSlotUsage();
    share_sum += usage.allocated_slots == 0
                     ? 0
                     : static_cast<double>(usage.filled_slots) / usage.allocated_slots;
    if (mode.width > 1) {
      const auto [unshared, shared] =
          BlocksWithoutAndWithSharing(output, scheduler.block_manager());
      unshared_sum += unshared;
      shared_sum += shared;
    }
    batch_sum += static_cast<double>(scheduler.num_running());
    ++stats.num_steps;
    now += config.step_time.Seconds(context, prefill);
    for (const auto& group : scheduler.FreeFinished()) {
      stats.max_request_preemptions =
          std::max(stats.max_request_preemptions, group->num_preemptions());
    }
  }
  stats.token_share = share_sum / std::max<int64_t>(1, stats.num_steps);
  stats.mean_batched_requests = batch_sum / std::max<int64_t>(1, stats.num_steps);
  stats.sharing_saving =
      unshared_sum == 0 ? 0
                        : 1.0 - static_cast<double>(shared_sum) / static_cast<double>(unshared_sum);
  stats.simulated_seconds = now;
  return stats;
}

}  // namespace pagoda::scheduler::sim
