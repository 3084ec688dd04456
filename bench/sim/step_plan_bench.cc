// The step plan's host work per decode step with long contexts (issue 47):
// the server's build and serialization of the plan, and a worker's parse and
// block-table resolution, at 256 and 1,024 sequences of 1,024-token prompts
// (64 blocks of 16 each), each sampling with temperature, top-p, top-k and
// its own seed. Arg 1: 0 = whole block tables, the worker parsing into a
// heap message (as before block-table deltas); 1 = deltas, the worker
// parsing into a heap message and resolving them (gRPC's path); 2 = deltas,
// parsed into an arena (the step channel's path); 3 = as 2, and rows whose
// sampling options are unchanged leave them out (sampling_unchanged).
// Arg 2 = 1: the penalty arm: every row has repetition, presence and
// frequency penalties (its options carry the prompt's 1,024 distinct tokens
// and its output counts), and each step's tokens vary, so the counts grow;
// arm 2 sends those options whole every step (as before SamplingDelta), arm
// 3 a SamplingDelta (the step's token and the bans). The
// scheduling and output processing around them are the same in all and
// timed apart. Counters: server_us and worker_us per step, plan_bytes per
// step. BM_RequestLookup: what Engine::StreamDeltas' lookup of each delta's
// request by its id costs a step (a hash of a "req-N-<16 hex>" string per
// delta), against a slot number with a generation check (issue 47's
// proposal, not built): the most such a change could save.
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "benchmark/benchmark.h"
#include "google/protobuf/arena.h"
#include "scheduler/engine/block_table_deltas.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/sampling_deltas.h"
#include "scheduler/engine/scheduler.h"
#include "scheduler/engine/step_plan.h"
#include "worker/block_table_cache.h"

namespace pagoda::scheduler {
namespace {

constexpr int kPlanBlockSize = 16;
constexpr int kPromptTokens = 1024;

double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

void BM_StepPlanWire(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  const bool use_deltas = state.range(1) != 0;
  const bool omit_unchanged_sampling = state.range(1) == 3;
  const bool penalties = state.range(2) != 0;
  SchedulerConfig config;
  config.block_size = kPlanBlockSize;
  config.num_gpu_blocks = num_seqs * (kPromptTokens + 4096) / kPlanBlockSize + 16;
  config.max_num_seqs = num_seqs;
  config.max_num_batched_tokens = num_seqs * kPromptTokens;
  config.max_model_len = 1 << 20;
  Scheduler scheduler(config);
  OutputProcessor processor({}, config.max_model_len, &scheduler);
  StoppingOptions stopping;
  stopping.max_tokens = 1 << 20;
  stopping.ignore_eos = true;
  for (int i = 0; i < num_seqs; ++i) {
    std::vector<int32_t> prompt(kPromptTokens);
    std::iota(prompt.begin(), prompt.end(), i);
    SamplingOptions sampling;
    sampling.temperature = 0.7f;
    sampling.top_p = 0.9f;
    sampling.top_k = 40;
    sampling.seed = 1000 + i;
    if (penalties) {
      sampling.repetition_penalty = 1.1f;
      sampling.presence_penalty = 0.2f;
      sampling.frequency_penalty = 0.1f;
    }
    scheduler.AddSequenceGroup(std::make_unique<SequenceGroup>(
        "r" + std::to_string(i), std::move(prompt), i, sampling, stopping,
        absl::UnixEpoch() + absl::Milliseconds(i)));
  }
  BlockTableDeltas deltas;
  SamplingDeltas sampling_deltas;
  worker::BlockTableCache worker_tables;
  worker_tables.Reset(config.num_gpu_blocks);
  double server_us = 0, worker_us = 0, bytes = 0;
  int64_t step_id = 0;
  std::string wire;
  auto run_step = [&] {
    SchedulerOutput output = scheduler.Schedule();
    auto start = std::chrono::steady_clock::now();
    google::protobuf::Arena arena(StepArenaOptions());
    auto* plan = google::protobuf::Arena::CreateMessage<worker::v1::StepPlan>(&arena);
    BuildStepPlanInto(step_id++, output, scheduler.block_manager(), {}, plan,
                      use_deltas ? &deltas : nullptr,
                      omit_unchanged_sampling ? &sampling_deltas : nullptr);
    wire.clear();
    plan->SerializeToString(&wire);
    server_us += MicrosSince(start);
    bytes += static_cast<double>(wire.size());
    start = std::chrono::steady_clock::now();
    google::protobuf::Arena worker_arena(StepArenaOptions());
    worker::v1::StepPlan heap_plan;
    worker::v1::StepPlan& received =
        state.range(1) >= 2
            ? *google::protobuf::Arena::CreateMessage<worker::v1::StepPlan>(&worker_arena)
            : heap_plan;
    received.ParseFromString(wire);
    if (use_deltas) {  // Whole tables: the parse alone, as before deltas.
      if (!worker_tables.Resolve(&received).ok()) state.SkipWithError("a delta was refused");
      worker_tables.Commit();
    }
    worker_us += MicrosSince(start);
    std::vector<GeneratedToken> sampled(output.scheduled.size(), GeneratedToken{7, -1.0f, {}});
    if (penalties) {  // Outputs of many distinct tokens, some repeated.
      for (size_t i = 0; i < sampled.size(); ++i) {
        sampled[i].token_id = static_cast<int32_t>((step_id * 37 + i * 11) % 3000);
      }
    }
    processor.Process(output, sampled);
    scheduler.CommitComputedBlocks(output);
    scheduler.FreeFinished();
    return output.scheduled.size();
  };
  run_step();  // The prefill.
  server_us = worker_us = bytes = 0;
  for (auto _ : state) {
    if (run_step() != static_cast<size_t>(num_seqs)) state.SkipWithError("a sequence stopped");
  }
  const double steps = static_cast<double>(state.iterations());
  state.counters["server_us"] = server_us / steps;
  state.counters["worker_us"] = worker_us / steps;
  state.counters["plan_bytes"] = bytes / steps;
}
struct LookupState {
  int64_t generated = 0;
  uint32_t generation = 0;
};

void BM_RequestLookup(benchmark::State& state) {
  const int num_requests = static_cast<int>(state.range(0));
  const bool by_slot = state.range(1) != 0;
  absl::flat_hash_map<std::string, std::unique_ptr<LookupState>> by_id;
  std::vector<std::unique_ptr<LookupState>> slots;
  std::vector<std::string> ids;
  for (int i = 0; i < num_requests; ++i) {
    char id[48];
    std::snprintf(id, sizeof(id), "req-%d-%016llx", i,
                  static_cast<unsigned long long>(0x9e3779b97f4a7c15ull * (i + 1)));
    ids.push_back(id);
    by_id[id] = std::make_unique<LookupState>();
    slots.push_back(std::make_unique<LookupState>());
  }
  for (auto _ : state) {
    for (int i = 0; i < num_requests; ++i) {
      LookupState* found = nullptr;
      if (by_slot) {
        LookupState* slot = slots[i].get();
        if (slot->generation == 0) found = slot;  // A stale generation: dropped.
      } else {
        auto it = by_id.find(ids[i]);
        if (it != by_id.end()) found = it->second.get();
      }
      if (found != nullptr) ++found->generated;
    }
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_RequestLookup)
    ->ArgsProduct({{256, 1024}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_StepPlanWire)
    ->ArgsProduct({{256, 1024}, {0, 1, 2, 3}, {0}})
    ->Iterations(300)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StepPlanWire)
    ->ArgsProduct({{256, 1024}, {2, 3}, {1}})
    ->Iterations(300)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagoda::scheduler

BENCHMARK_MAIN();
