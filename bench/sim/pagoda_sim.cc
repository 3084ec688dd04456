#include <algorithm>
#include <memory>
#include <random>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/sim/memory_sim.h"
#include "glog/logging.h"
#include "scheduler/engine/kv_slot_usage.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"

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

SchedulerConfig SchedulerConfigFor(const SimConfig& config) {
  SchedulerConfig scheduler_config;
  scheduler_config.block_size = config.block_size;
  scheduler_config.num_gpu_blocks = config.kv_tokens / config.block_size;
  scheduler_config.num_cpu_blocks = scheduler_config.num_gpu_blocks;
  scheduler_config.max_num_seqs = config.max_num_seqs;
  scheduler_config.max_num_batched_tokens = config.max_num_batched_tokens;
  scheduler_config.max_model_len = config.max_model_len;
  scheduler_config.enable_prefix_caching = false;  // Synthetic prompts share nothing.
  scheduler_config.avoid_thrashing = config.avoid_thrashing;
  return scheduler_config;
}

// Trace request `index` as a sequence group: a random prompt, decoded as
// `mode` says, and exactly output_len tokens long (EOS is ignored).
std::unique_ptr<SequenceGroup> MakeGroup(const TraceRequest& request, size_t index, DecodeMode mode,
                                         std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> token(3, kVocab - 1);
  std::vector<int32_t> prompt(request.prompt_len);
  for (int32_t& id : prompt) id = token(rng);
  SamplingOptions sampling;
  sampling.temperature = mode.beam_search ? 0.0f : 1.0f;
  sampling.n = sampling.best_of = mode.width;
  sampling.use_beam_search = mode.beam_search;
  StoppingOptions stopping;
  stopping.max_tokens = request.output_len;
  stopping.ignore_eos = true;
  return std::make_unique<SequenceGroup>(
      absl::StrCat("r", index), std::move(prompt), static_cast<int64_t>(index), sampling, stopping,
      absl::UnixEpoch() + absl::Seconds(request.arrival_seconds));
}

// A step's work for the step-time model: the tokens it attends over
// (context) and the tokens it prefills.
std::pair<int64_t, int64_t> ContextAndPrefillTokens(const SchedulerOutput& output) {
  int64_t context = 0;
  int64_t prefill = 0;
  for (const ScheduledSequence& entry : output.scheduled) {
    context += entry.start_position + entry.num_tokens;
    if (entry.num_tokens > 1) prefill += entry.num_tokens;
  }
  return {context, prefill};
}

// Per-step measurements, summed over the run and averaged into MemoryStats
// at its end.
struct StepSums {
  double share = 0;  // Of allocated KV slots, the share holding a token.
  double batch = 0;  // Running requests.
  int64_t unshared_blocks = 0;
  int64_t shared_blocks = 0;
};

// Measures the step just committed. Blocks are only counted with more than
// one sequence per request, as nothing else shares them.
void AddStep(const Scheduler& scheduler, const SchedulerOutput& output, DecodeMode mode,
             StepSums* sums) {
  const KvSlotUsage usage = KvSlotUsageMeter().Measure(scheduler);
  sums->share += usage.allocated_slots == 0
                     ? 0
                     : static_cast<double>(usage.filled_slots) / usage.allocated_slots;
  if (mode.width > 1) {
    const auto [unshared, shared] = BlocksWithoutAndWithSharing(output, scheduler.block_manager());
    sums->unshared_blocks += unshared;
    sums->shared_blocks += shared;
  }
  sums->batch += static_cast<double>(scheduler.num_running());
}

void SetMeans(const StepSums& sums, MemoryStats* stats) {
  stats->token_share = sums.share / std::max<int64_t>(1, stats->num_steps);
  stats->mean_batched_requests = sums.batch / std::max<int64_t>(1, stats->num_steps);
  stats->sharing_saving = sums.unshared_blocks == 0
                              ? 0
                              : 1.0 - static_cast<double>(sums.shared_blocks) /
                                          static_cast<double>(sums.unshared_blocks);
}

}  // namespace

MemoryStats SimulatePagoda(const std::vector<TraceRequest>& trace, const SimConfig& config,
                           DecodeMode mode, uint64_t seed) {
  Scheduler scheduler(SchedulerConfigFor(config));
  OutputProcessor processor({}, config.max_model_len, &scheduler);
  std::mt19937_64 rng(seed);
  MemoryStats stats;
  StepSums sums;
  size_t next = 0;
  double now = 0;
  while (next < trace.size() || scheduler.HasUnfinished()) {
    if (!scheduler.HasUnfinished() && trace[next].arrival_seconds > now) {
      now = trace[next].arrival_seconds;
    }
    for (; next < trace.size() && trace[next].arrival_seconds <= now; ++next) {
      scheduler.AddSequenceGroup(MakeGroup(trace[next], next, mode, rng));
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
    const auto [context, prefill] = ContextAndPrefillTokens(output);
    processor.Process(output, FakeSample(output, rng));
    scheduler.CommitComputedBlocks(output);
    AddStep(scheduler, output, mode, &sums);
    ++stats.num_steps;
    now += config.step_time.Seconds(context, prefill);
    for (const auto& group : scheduler.FreeFinished()) {
      stats.max_request_preemptions =
          std::max(stats.max_request_preemptions, group->num_preemptions());
    }
  }
  SetMeans(sums, &stats);
  stats.simulated_seconds = now;
  return stats;
}

}  // namespace pagoda::scheduler::sim
