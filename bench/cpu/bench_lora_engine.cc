// LoRA's cost on whole steps (issue 48's speed goal): the Engine over one
// real CPU pagoda-worker with the benchmark model (scripts/make_tiny_model.py
// --preset bench), `batch` concurrent greedy requests of 16 prompt tokens
// and 64 output tokens, run base-only and then spread round-robin over 4
// adapters (rank 16, every projection) and the base model, alternating
// which goes first, in the same run. Prints each run's output tokens/s, the median ratio
// mixed / base-only (goal >= 0.8), and each adapter's load time on the
// worker (LoadLoraAdapterResponse.load_seconds).
//   bench_lora_engine [--batch 32] [--rounds 7] [--cpu-threads 2]
// or by position, in that order: bench_lora_engine 32 7 2
// Needs /usr/bin/python3 with numpy (the adapters are written by
// tests/reference/lora_reference.py); run from the repository root.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "scheduler/engine/engine.h"
#include "scheduler/workers/grpc_worker_group.h"

ABSL_FLAG(int, batch, 32, "Concurrent requests (1..256).");
ABSL_FLAG(int, rounds, 7, "Runs of each kind, alternated (1..50).");
ABSL_FLAG(int, cpu_threads, 2, "The worker's CPU threads (1..64).");

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

constexpr int kAdapters = 4;
constexpr int kPromptTokens = 16;
constexpr int kOutputTokens = 64;
constexpr int kBlockSize = 16;

// Counts a request's tokens and when it ended.
class CountingSink : public RequestSink {
 public:
  void OnDelta(const RequestDelta&) override {}
  void OnFinish(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    status_ = status;
    done_ = true;
  }
  absl::Status Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return status_;
  }

 private:
  absl::Mutex mu_;
  bool done_ = false;
  absl::Status status_;
};

bool Run(const std::string& command) {
  if (std::system(command.c_str()) == 0) return true;
  std::fprintf(stderr, "failed: %s\n", command.c_str());
  return false;
}

// Output tokens per second of `batch` requests; request i uses
// `lora_of(i)` (0: the base model).
double Throughput(Engine& engine, lora::LoraRegistry& registry, int batch, int round,
                  const std::vector<int>& ids, bool mixed) {
  std::vector<std::shared_ptr<CountingSink>> sinks;
  const absl::Time start = absl::Now();
  for (int i = 0; i < batch; ++i) {
    EngineRequest request;
    request.request_id = absl::StrCat(mixed ? "m" : "b", round, "_", i);
    for (int t = 0; t < kPromptTokens; ++t)
      request.prompt_token_ids.push_back((97 * i + 13 * t + 5) % 2048);
    request.sampling.temperature = 0.0f;
    request.stopping.max_tokens = kOutputTokens;
    request.stopping.ignore_eos = true;
    const int which = mixed ? i % (kAdapters + 1) : 0;  // 0: the base model.
    if (which > 0) {
      request.lora_id = ids[which - 1];
      (void)registry.Acquire(registry.FindById(request.lora_id)->spec.name);
    }
    auto sink = std::make_shared<CountingSink>();
    request.sink = sink;
    sinks.push_back(sink);
    if (absl::Status added = engine.AddRequest(std::move(request)); !added.ok()) {
      std::fprintf(stderr, "refused: %s\n", std::string(added.message()).c_str());
      return 0;
    }
  }
  for (const auto& sink : sinks) {
    if (absl::Status status = sink->Wait(); !status.ok()) {
      std::fprintf(stderr, "failed: %s\n", std::string(status.message()).c_str());
      return 0;
    }
  }
  return batch * kOutputTokens / absl::ToDoubleSeconds(absl::Now() - start);
}

int Main(int batch, int rounds, int cpu_threads) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("bench_lora_engine_", getpid()))
          .string();
  std::filesystem::create_directories(dir);
  if (!Run(absl::StrCat("/usr/bin/python3 scripts/make_tiny_model.py --preset bench --out ", dir,
                        "/base > /dev/null"))) {
    return 1;
  }
  lora::LoraRegistry registry;
  std::vector<int> ids;
  for (int a = 0; a < kAdapters; ++a) {
    const std::string path = absl::StrCat(dir, "/adapter", a);
    if (!Run(absl::StrCat("/usr/bin/python3 tests/reference/lora_reference.py make --base ", dir,
                          "/base --out ", path, " --rank 16 --alpha 32 --seed ", a,
                          " --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"))) {
      return 1;
    }
    ids.push_back(*registry.Add({absl::StrCat("adapter", a), path, ""}));
  }
  auto workers = GrpcWorkerGroup::Launch(PAGODA_WORKER_BINARY, 1, absl::Seconds(30));
  if (!workers.ok()) return 1;
  wv1::LoadModelRequest load;
  load.set_model_dir(dir + "/base");
  load.set_block_size(kBlockSize);
  load.set_device("cpu");
  load.set_kv_cache_memory_bytes(int64_t{256} << 20);
  load.set_max_num_batched_tokens(2048);
  load.set_max_num_seqs(batch);
  load.set_cpu_threads(cpu_threads);
  load.set_max_loras(kAdapters);
  load.set_max_lora_rank(16);
  auto loaded = (*workers)->LoadModel(load);
  if (!loaded.ok()) return 1;
  wv1::InitCacheRequest cache;
  cache.set_num_gpu_blocks(std::min(loaded->num_gpu_blocks(), 1024));
  if (!(*workers)->InitCache(cache).ok()) return 1;
  // The load time, measured into each slot once (the engine loads again).
  for (int a = 0; a < kAdapters; ++a) {
    wv1::LoadLoraAdapterRequest request;
    request.set_slot(a + 1);
    request.set_path(registry.FindById(ids[a])->spec.path);
    const absl::Time start = absl::Now();
    auto answer = (*workers)->LoadLoraAdapter(request);
    if (!answer.ok()) return 1;
    std::printf("adapter %d: load %.1f ms on the worker, %.1f ms round trip, %.2f MiB\n", a,
                1e3 * answer->load_seconds(), absl::ToDoubleMilliseconds(absl::Now() - start),
                answer->bytes() / 1048576.0);
  }
  EngineConfig config;
  config.scheduler.block_size = kBlockSize;
  config.scheduler.num_gpu_blocks = cache.num_gpu_blocks();
  config.scheduler.max_num_seqs = batch;
  config.scheduler.max_num_batched_tokens = 2048;
  config.scheduler.max_model_len = 512;
  config.scheduler.enable_chunked_prefill = true;
  config.lora_registry = &registry;
  config.max_loras = kAdapters;
  Engine engine(config, workers->get(), nullptr);
  engine.Start();
  Throughput(engine, registry, batch, -1, ids, /*mixed=*/true);  // Warm: slots loaded.
  std::vector<double> ratios;
  for (int round = 0; round < rounds; ++round) {
    // Alternating which goes first, so that a drift in the machine's load
    // favours neither.
    double base = 0, mixed = 0;
    if (round % 2 == 0) base = Throughput(engine, registry, batch, round, ids, false);
    mixed = Throughput(engine, registry, batch, round, ids, true);
    if (round % 2 == 1) base = Throughput(engine, registry, batch, round, ids, false);
    std::printf("round %d: base-only %.0f tok/s, 4 adapters + base %.0f tok/s, ratio %.3f\n", round,
                base, mixed, mixed / base);
    ratios.push_back(mixed / base);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf(
      "batch %d, %d cpu threads: median ratio (4 adapters + base) / base-only = %.3f "
      "(goal >= 0.8)\n",
      batch, cpu_threads, ratios[ratios.size() / 2]);
  engine.Stop();
  (*workers)->Shutdown();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace pagoda::scheduler

int main(int argc, char** argv) {
  pagoda::bench::ParseBenchCommandLine(
      argc, argv,
      {"bench_lora_engine",
       "bench_lora_engine [--batch N] [--rounds N] [--cpu-threads N], or "
       "those by position"},
      {"batch", "rounds", "cpu_threads"});
  const int batch = absl::GetFlag(FLAGS_batch);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int threads = absl::GetFlag(FLAGS_cpu_threads);
  pagoda::bench::CheckFlags("bench_lora_engine",
                            {pagoda::flag_check::Range("batch", batch, 1, 256),
                             pagoda::flag_check::Range("rounds", rounds, 1, 50),
                             pagoda::flag_check::Range("cpu-threads", threads, 1, 64)});
  return pagoda::scheduler::Main(batch, rounds, threads);
}
