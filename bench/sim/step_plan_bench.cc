// The step plan's host work per decode step with long contexts (issue 47):
// the server's build and serialization of the plan, and a worker's parse and
// block-table resolution, at 256 and 1,024 sequences of 1,024-token prompts
// (64 blocks of 16 each). Arg 1: 0 = whole block tables, the worker parsing
// into a heap message (as before block-table deltas); 1 = deltas, the worker
// parsing into a heap message and resolving them (gRPC's path); 2 = deltas,
// parsed into an arena (the step channel's path). The scheduling and output
// processing around them are the same in all and timed apart. Counters:
// server_us and worker_us per step, plan_bytes per step.
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "google/protobuf/arena.h"
#include "scheduler/engine/block_table_deltas.h"
#include "scheduler/engine/output_processor.h"
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
    scheduler.AddSequenceGroup(std::make_unique<SequenceGroup>(
        "r" + std::to_string(i), std::move(prompt), i, SamplingOptions{}, stopping,
        absl::UnixEpoch() + absl::Milliseconds(i)));
  }
  BlockTableDeltas deltas;
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
                      use_deltas ? &deltas : nullptr);
    wire.clear();
    plan->SerializeToString(&wire);
    server_us += MicrosSince(start);
    bytes += static_cast<double>(wire.size());
    start = std::chrono::steady_clock::now();
    google::protobuf::Arena worker_arena(StepArenaOptions());
    worker::v1::StepPlan heap_plan;
    worker::v1::StepPlan& received =
        state.range(1) == 2
            ? *google::protobuf::Arena::CreateMessage<worker::v1::StepPlan>(&worker_arena)
            : heap_plan;
    received.ParseFromString(wire);
    if (use_deltas) {  // Whole tables: the parse alone, as before deltas.
      if (!worker_tables.Resolve(&received).ok()) state.SkipWithError("a delta was refused");
      worker_tables.Commit();
    }
    worker_us += MicrosSince(start);
    std::vector<GeneratedToken> sampled(output.scheduled.size(), GeneratedToken{7, -1.0f, {}});
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
BENCHMARK(BM_StepPlanWire)
    ->ArgsProduct({{256, 1024}, {0, 1, 2}})
    ->Iterations(300)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagoda::scheduler

BENCHMARK_MAIN();
