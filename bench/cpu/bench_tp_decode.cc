// The tensor-parallel decode step at two ranks, with the lm_head split over
// the vocabulary (each rank computes its rows, rank 0 gathers them) against
// the layout before it, the head whole on rank 0 (which computes every
// logit while the other rank waits), in the same run: two in-process
// groups over TCP on loopback, each rank a CPU backend of --threads
// threads. B sequences prefill --prompt tokens, then --tokens decode steps
// run teacher-forced (every rank knows the next token), rank 0 sampling
// each step's rows as the worker does; the step's time is rank 0's wall
// time from the forward to the sampled tokens. Rounds alternate the two
// layouts; the medians and their ratio are printed.
//
//   bench_cpu_tp_decode --model DIR [--threads 1] [--batches 1,8]
//                       [--prompt 32] [--tokens 32] [--rounds 3]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "wire/rendezvous_store_server.h"
#include "wire/worker_secret.h"
#include "worker/cache_engine.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"
#include "worker/tensor_parallel_group.h"

ABSL_FLAG(std::string, model, "", "Model directory (required).");
ABSL_FLAG(int, threads, 1, "CPU backend threads of each rank.");
ABSL_FLAG(pagoda::bench::PositiveIntList, batches, (pagoda::bench::PositiveIntList{{1, 8}}),
          "Batch sizes to time, comma separated.");
ABSL_FLAG(int, prompt, 32, "Prompt tokens per sequence.");
ABSL_FLAG(int, tokens, 32, "Decode steps per round.");
ABSL_FLAG(int, rounds, 3, "Timed rounds of each layout per batch size (the median is printed).");

namespace pagoda::worker {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBlockSize = 16;
constexpr int kWorld = 2;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_cpu_tp_decode: %s\n", message.c_str());
  std::exit(1);
}

// The command line's values (their defaults are the ABSL_FLAGs').
struct Flags {
  std::string model;
  int threads;
  std::vector<int> batches;
  int prompt;
  int tokens;
  int rounds;
};

Flags ParseFlags(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_cpu_tp_decode",
                                "bench_cpu_tp_decode --model DIR [--threads N] [--batches 1,8] "
                                "[--prompt N] [--tokens N] [--rounds N]"});
  const Flags flags{.model = absl::GetFlag(FLAGS_model),
                    .threads = absl::GetFlag(FLAGS_threads),
                    .batches = absl::GetFlag(FLAGS_batches).values,
                    .prompt = absl::GetFlag(FLAGS_prompt),
                    .tokens = absl::GetFlag(FLAGS_tokens),
                    .rounds = absl::GetFlag(FLAGS_rounds)};
  bench::CheckFlags("bench_cpu_tp_decode",
                    {bench::Required("model", flags.model), bench::Threads(flags.threads),
                     flag_check::Range("prompt", flags.prompt, 1, 1 << 20),
                     flag_check::Range("tokens", flags.tokens, 1, 1 << 20),
                     flag_check::Range("rounds", flags.rounds, 1, 1000)});
  return flags;
}

// One rank of a loaded group: its backend, its group, its shard, its cache.
struct Rank {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<CacheEngine> cache;
  SampleResults samples;
};

int BlocksPerSeq(const Flags& flags) {
  return (flags.prompt + flags.tokens + kBlockSize - 1) / kBlockSize;
}

// Both ranks of a group joined under `prefix`, loaded with the head split
// or whole on rank 0.
std::vector<Rank> LoadGroup(const Flags& flags, const wire::RendezvousStoreServer& store,
                            const std::string& secret, const std::string& prefix, bool whole) {
  std::vector<Rank> ranks(kWorld);
  const int max_batch = *std::max_element(flags.batches.begin(), flags.batches.end());
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      GroupMembership membership;
      membership.rank = r;
      membership.world_size = kWorld;
      membership.rendezvous = {
          .host = "127.0.0.1", .port = store.port(), .secret = secret, .prefix = prefix};
      Rank& rank = ranks[r];
      rank.backend = CreateCpuBackend(flags.threads);
      auto communicator = JoinGroup(membership, flags.model, TcpTransport("127.0.0.1"));
      if (!communicator.ok()) Die(std::string(communicator.status().message()));
      rank.communicator = *std::move(communicator);
      LlamaLoadOptions options;
      options.max_num_batched_tokens = max_batch * flags.prompt;
      options.max_num_seqs = max_batch;
      options.block_size = kBlockSize;
      options.whole_lm_head_on_rank0 = whole;
      auto model =
          LlamaModel::Load(flags.model, rank.backend.get(), rank.communicator.get(), options);
      if (!model.ok()) Die(std::string(model.status().message()));
      rank.model = *std::move(model);
      rank.cache = std::make_unique<CacheEngine>(rank.backend.get(),
                                                 rank.model->CacheShape(kBlockSize, DType::kF32),
                                                 max_batch * BlocksPerSeq(flags), 0);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return ranks;
}

// A step of `batch` sequences: the prompt, or one decode token at `position`.
v1::StepPlan Plan(const Flags& flags, int batch, int position, int vocab) {
  v1::StepPlan plan;
  for (int s = 0; s < batch; ++s) {
    v1::SequenceStep* seq = plan.add_sequences();
    seq->set_seq_id(s);
    const int count = position == 0 ? flags.prompt : 1;
    for (int i = 0; i < count; ++i) seq->add_token_ids((s * 131 + (position + i) * 7 + 1) % vocab);
    seq->set_start_position(position);
    for (int b = 0; b < BlocksPerSeq(flags); ++b) {
      seq->add_block_table(s * BlocksPerSeq(flags) + b);
    }
    seq->set_do_sample(true);
  }
  return plan;
}

// One round on both ranks; rank 0's decode step times, in seconds.
std::vector<double> RunRound(std::vector<Rank>& ranks, const Flags& flags, int batch) {
  std::vector<double> steps;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      Rank& rank = ranks[r];
      const ModelConfig& config = rank.model->config();
      const BatchLimits limits = rank.cache->Limits(config.vocab_size, rank.model->max_positions());
      for (int t = 0; t < flags.tokens; ++t) {
        const int position = t == 0 ? 0 : flags.prompt + t - 1;
        auto flat = FlattenStepPlan(Plan(flags, batch, position, config.vocab_size), limits);
        if (!flat.ok()) Die(std::string(flat.status().message()));
        const auto start = Clock::now();
        auto output = rank.model->Forward(*flat, rank.cache.get());
        if (!output.ok()) Die(std::string(output.status().message()));
        if (r == 0) rank.backend->Sample(output->logits, output->sampling, &rank.samples);
        if (r == 0 && t > 0) {
          steps.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return steps;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  wire::RendezvousStoreServer::Options options;
  options.secret = GenerateWorkerSecret().value();
  auto store = wire::RendezvousStoreServer::Start(options);
  if (!store.ok()) Die(std::string(store.status().message()));
  std::vector<Rank> whole = LoadGroup(flags, **store, options.secret, "whole", true);
  std::vector<Rank> split = LoadGroup(flags, **store, options.secret, "split", false);
  const ModelConfig& config = split[0].model->config();
  std::printf("model %s: hidden %d, vocab %d, %d layers; 2 ranks x %d threads\n",
              flags.model.c_str(), config.hidden_size, config.vocab_size, config.num_hidden_layers,
              flags.threads);
  for (int batch : flags.batches) {
    std::vector<double> whole_steps, split_steps;
    for (int round = 0; round < flags.rounds; ++round) {
      for (double s : RunRound(whole, flags, batch)) whole_steps.push_back(s);
      for (double s : RunRound(split, flags, batch)) split_steps.push_back(s);
    }
    const double whole_ms = 1e3 * Median(whole_steps);
    const double split_ms = 1e3 * Median(split_steps);
    std::printf("batch %2d  decode step: head whole on rank 0 %.3f ms, split %.3f ms  (%.2fx)\n",
                batch, whole_ms, split_ms, whole_ms / split_ms);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
