// Google Benchmarks of the block manager's operations and of the scheduler's
// CPU time per step (Schedule + output processing + freeing) with 256 and
// 1,024 running sequences. Goal: under 1 us per running sequence per step.
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "scheduler/engine/output_processor.h"
#include "scheduler/engine/scheduler.h"

namespace pagoda::scheduler {
namespace {

constexpr int kBlockSize = 16;

std::unique_ptr<SequenceGroup> MakeGroup(int64_t seq_id, int prompt_len, int salt = 0) {
  std::vector<int32_t> prompt(prompt_len);
  std::iota(prompt.begin(), prompt.end(), salt);
  return std::make_unique<SequenceGroup>("r" + std::to_string(seq_id), std::move(prompt), seq_id,
                                         SamplingOptions{}, StoppingOptions{}, absl::UnixEpoch());
}

void SetStatus(SequenceGroup& group, SequenceStatus status) {
  for (auto& seq : group.seqs()) seq->set_status(status);
}

void BM_AllocateAndFree512TokenPrompt(benchmark::State& state) {
  BlockManager manager(kBlockSize, 1024, 0, 0.01, /*enable_prefix_caching=*/state.range(0) != 0);
  int64_t id = 0;
  for (auto _ : state) {
    auto group = MakeGroup(id, 512, static_cast<int>(id));  // Distinct: no hits.
    benchmark::DoNotOptimize(manager.Allocate(*group));
    manager.Free(id++);
  }
}
BENCHMARK(BM_AllocateAndFree512TokenPrompt)->Arg(0)->Arg(1);

void BM_PrefixHitOf512TokenPrompt(benchmark::State& state) {
  BlockManager manager(kBlockSize, 1024, 0, 0.01, true);
  auto first = MakeGroup(0, 512);
  (void)manager.Allocate(*first);
  first->seqs()[0]->set_num_computed_tokens(512);
  manager.CommitComputedBlocks(*first->seqs()[0]);
  int64_t id = 1;
  for (auto _ : state) {
    auto group = MakeGroup(id, 512);
    benchmark::DoNotOptimize(manager.Allocate(*group));
    manager.Free(id++);
  }
}
BENCHMARK(BM_PrefixHitOf512TokenPrompt);

void BM_AppendSlotsDecode(benchmark::State& state) {
  BlockManager manager(kBlockSize, 1 << 16, 0, 0.0);
  auto group = MakeGroup(0, 16);
  (void)manager.Allocate(*group);
  SetStatus(*group, SequenceStatus::kRunning);
  Sequence& seq = *group->seqs()[0];
  for (auto _ : state) {
    seq.AppendToken({1, 0.0f, {}});
    benchmark::DoNotOptimize(manager.AppendSlots(seq));
    if (seq.length() >= (1 << 16) * kBlockSize - 1) state.SkipWithError("pool exhausted");
  }
}
BENCHMARK(BM_AppendSlotsDecode)->Iterations(500000);

void BM_ForkAndCopyOnWrite(benchmark::State& state) {
  BlockManager manager(kBlockSize, 1024, 0, 0.0);
  auto group = MakeGroup(0, 200);  // 13 blocks, the last partial.
  (void)manager.Allocate(*group);
  SetStatus(*group, SequenceStatus::kRunning);
  Sequence& parent = *group->seqs()[0];
  int64_t id = 1;
  for (auto _ : state) {
    Sequence* child = group->AddForkedSequence(parent, id);
    manager.Fork(parent, *child);
    child->AppendToken({1, 0.0f, {}});
    benchmark::DoNotOptimize(manager.AppendSlots(*child));
    manager.Free(id++);
    group->seqs().pop_back();
  }
}
BENCHMARK(BM_ForkAndCopyOnWrite);

void BM_SwapOutAndInOfFourForked512TokenSequences(benchmark::State& state) {
  BlockManager manager(kBlockSize, 1024, 1024, 0.0);
  auto group = MakeGroup(0, 512);
  (void)manager.Allocate(*group);
  SetStatus(*group, SequenceStatus::kRunning);
  for (int i = 1; i < 4; ++i) {
    Sequence* child = group->AddForkedSequence(*group->seqs()[0], i);
    manager.Fork(*group->seqs()[0], *child);
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(manager.SwapOut(*group));
    SetStatus(*group, SequenceStatus::kSwapped);
    benchmark::DoNotOptimize(manager.SwapIn(*group));
    SetStatus(*group, SequenceStatus::kRunning);
  }
}
BENCHMARK(BM_SwapOutAndInOfFourForked512TokenSequences);

// One engine step's CPU work on the server with state.range(0) sequences
// decoding: Schedule, appending the sampled tokens with stop checks,
// prefix-cache commits, freeing. No worker, no RPC.
void BM_SchedulerStep(benchmark::State& state) {
  const int num_seqs = static_cast<int>(state.range(0));
  constexpr int kSteps = 2000;
  SchedulerConfig config;
  config.block_size = kBlockSize;
  config.num_gpu_blocks = num_seqs * (64 + kSteps + 64) / kBlockSize + 16;
  config.max_num_seqs = num_seqs;
  config.max_num_batched_tokens = num_seqs * 64;
  config.max_model_len = 1 << 20;
  Scheduler scheduler(config);
  OutputProcessor processor({}, config.max_model_len, &scheduler);
  StoppingOptions stopping;
  stopping.max_tokens = 1 << 20;
  stopping.ignore_eos = true;
  for (int i = 0; i < num_seqs; ++i) {
    std::vector<int32_t> prompt(64, i);
    scheduler.AddSequenceGroup(std::make_unique<SequenceGroup>(
        "r" + std::to_string(i), std::move(prompt), i, SamplingOptions{}, stopping,
        absl::UnixEpoch() + absl::Milliseconds(i)));
  }
  auto run_step = [&] {
    SchedulerOutput output = scheduler.Schedule();
    std::vector<GeneratedToken> sampled(output.scheduled.size(), GeneratedToken{7, -1.0f, {}});
    processor.Process(output, sampled);
    scheduler.CommitComputedBlocks(output);
    scheduler.FreeFinished();
    return output.scheduled.size();
  };
  run_step();  // The prefill.
  for (auto _ : state) {
    if (run_step() != static_cast<size_t>(num_seqs)) state.SkipWithError("a sequence stopped");
  }
  state.counters["per_running_seq"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * num_seqs,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SchedulerStep)->Arg(256)->Arg(1024)->Iterations(2000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagoda::scheduler

BENCHMARK_MAIN();
