// Speculative decoding's verify step on the CPU worker, in-process (no
// server, no RPC, no proposer): for each batch size B, B sequences prefill a
// prompt and decode greedily one token per step (plain), and decode again
// with k drafts per sequence per step taken from the plain run's output, so
// every draft is right (the ceiling: k + 1 tokens per step). Prints, per
// (B, k), decode tokens/s of both and their ratio, their rounds alternated
// in the same run, and the verify step's time against the plain step's; from that
// ratio, the speedup expected at a per-draft acceptance rate a (expected
// tokens per step (1 - a^(k+1)) / (1 - a), over the step-time ratio), which
// is where speculation stops paying at each batch size.
//
//   bench_cpu_spec_verify --model DIR [--threads 2] [--batches 1,8,32]
//                         [--ks 1,2,4,8] [--prompt 64] [--tokens 65] [--rounds 3]

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/model_runner.h"

ABSL_FLAG(std::string, model, "", "Model directory (required).");
ABSL_FLAG(int, threads, 2, "CPU backend threads.");
ABSL_FLAG(pagoda::bench::PositiveIntList, batches, (pagoda::bench::PositiveIntList{{1, 8, 32}}),
          "Batch sizes to time, comma separated.");
ABSL_FLAG(pagoda::bench::PositiveIntList, ks, (pagoda::bench::PositiveIntList{{1, 2, 4, 8}}),
          "Drafts per sequence per step to time, comma separated.");
ABSL_FLAG(int, prompt, 64, "Prompt tokens per sequence.");
ABSL_FLAG(int, tokens, 65,
          "Output tokens per sequence: the prefill's, then the decoded ones (2 or more).");
ABSL_FLAG(int, rounds, 3, "Timed rounds of each kind per (batch, k) (the median is printed).");

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;
using Clock = std::chrono::steady_clock;

constexpr int kBlockSize = 16;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_cpu_spec_verify: %s\n", message.c_str());
  std::exit(1);
}

// The command line's values (their defaults are the ABSL_FLAGs').
struct Flags {
  std::string model;
  int threads;
  std::vector<int> batches;
  std::vector<int> ks;
  int prompt;
  int tokens;  // Output tokens per sequence: the prefill's, then the decoded ones.
  int rounds;
};

Flags ParseFlags(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_cpu_spec_verify",
                                "bench_cpu_spec_verify --model DIR [--threads N] "
                                "[--batches 1,8,32] [--ks 1,2,4,8] [--prompt N] [--tokens N] "
                                "[--rounds N]"});
  const Flags flags{.model = absl::GetFlag(FLAGS_model),
                    .threads = absl::GetFlag(FLAGS_threads),
                    .batches = absl::GetFlag(FLAGS_batches).values,
                    .ks = absl::GetFlag(FLAGS_ks).values,
                    .prompt = absl::GetFlag(FLAGS_prompt),
                    .tokens = absl::GetFlag(FLAGS_tokens),
                    .rounds = absl::GetFlag(FLAGS_rounds)};
  bench::CheckFlags("bench_cpu_spec_verify",
                    {bench::Required("model", flags.model), bench::Threads(flags.threads),
                     flag_check::Range("prompt", flags.prompt, 1, 1 << 20),
                     flag_check::Range("tokens", flags.tokens, 2, 1 << 20),
                     flag_check::Range("rounds", flags.rounds, 1, 1000)});
  return flags;
}

int BlocksPerSeq(const Flags& flags) {
  return (flags.prompt + flags.tokens + kBlockSize - 1) / kBlockSize;
}

std::unique_ptr<ModelRunner> LoadRunner(const Flags& flags, int* vocab) {
  const int max_batch = *std::max_element(flags.batches.begin(), flags.batches.end());
  const int max_k = *std::max_element(flags.ks.begin(), flags.ks.end());
  std::unique_ptr<ModelRunner> runner = CreateCpuModelRunner();
  v1::LoadModelRequest load;
  load.set_model_dir(flags.model);
  load.set_block_size(kBlockSize);
  load.set_device("cpu");
  load.set_cpu_threads(flags.threads);
  load.set_max_num_seqs(max_batch * (max_k + 1));  // Logits rows of a verify step.
  load.set_max_num_batched_tokens(std::max(max_batch * (max_k + 1), max_batch * flags.prompt));
  load.set_kv_cache_memory_bytes(int64_t{4} << 30);
  absl::StatusOr<v1::LoadModelResponse> loaded = runner->LoadModel(load);
  if (!loaded.ok()) Die(std::string(loaded.status().message()));
  const int64_t blocks = static_cast<int64_t>(max_batch) * BlocksPerSeq(flags);
  if (loaded->num_gpu_blocks() < blocks) Die("KV cache too small");
  v1::InitCacheRequest cache;
  cache.set_num_gpu_blocks(blocks);
  if (absl::Status status = runner->InitCache(cache); !status.ok()) {
    Die(std::string(status.message()));
  }
  *vocab = loaded->vocab_size();
  return runner;
}

// One round of B sequences: the prefill, then decode steps until each has
// flags.tokens output tokens, with k drafts per step from `oracle` (the
// plain run's outputs; k = 0: plain). Returns the decode seconds and the
// decode steps taken; fills `outputs`.
struct Round {
  double decode_s = 0;
  int steps = 0;
};

Round RunRound(ModelRunner& runner, int batch, int k, const Flags& flags, int vocab,
               const std::vector<std::vector<int>>& oracle,
               std::vector<std::vector<int>>* outputs) {
  outputs->assign(batch, {});
  auto step = [&](bool prefill) {
    v1::StepPlan plan;
    for (int s = 0; s < batch; ++s) {
      const std::vector<int>& out = (*outputs)[s];
      v1::SequenceStep* seq = plan.add_sequences();
      seq->set_seq_id(s);
      if (prefill) {
        for (int i = 0; i < flags.prompt; ++i) seq->add_token_ids((s * 131 + i * 7 + 1) % vocab);
      } else {
        seq->add_token_ids(out.back());
        seq->set_start_position(flags.prompt + static_cast<int>(out.size()) - 1);
        const int drafts = std::min<int>(k, flags.tokens - static_cast<int>(out.size()) - 1);
        for (int j = 0; j < drafts; ++j) seq->add_draft_token_ids(oracle[s][out.size() + j]);
      }
      for (int b = 0; b < BlocksPerSeq(flags); ++b) {
        seq->add_block_table(s * BlocksPerSeq(flags) + b);
      }
      seq->set_do_sample(true);
      seq->set_sample_index(static_cast<int>(out.size()));
    }
    absl::StatusOr<v1::StepResult> result = runner.ExecuteStep(plan);
    if (!result.ok()) Die(std::string(result.status().message()));
    for (int s = 0; s < batch; ++s) {
      const v1::SampledToken& token = result->tokens(s);
      for (int32_t id : token.accepted_draft_ids()) (*outputs)[s].push_back(id);
      (*outputs)[s].push_back(token.token_id());
    }
  };
  step(/*prefill=*/true);
  Round round;
  const auto start = Clock::now();
  while (static_cast<int>((*outputs)[0].size()) < flags.tokens) {
    step(/*prefill=*/false);
    ++round.steps;
  }
  round.decode_s = std::chrono::duration<double>(Clock::now() - start).count();
  return round;
}

// Plain and speculative rounds alternated (after a warm-up of each), so a
// shared machine's load drifts over both alike; the median of each.
struct Pair {
  Round plain, spec;
};

Pair MedianRounds(ModelRunner& runner, int batch, int k, const Flags& flags, int vocab,
                  const std::vector<std::vector<int>>& oracle) {
  std::vector<std::vector<int>> plain_out, spec_out;
  RunRound(runner, batch, 0, flags, vocab, {}, &plain_out);
  RunRound(runner, batch, k, flags, vocab, oracle, &spec_out);
  std::vector<Round> plain, spec;
  for (int r = 0; r < flags.rounds; ++r) {
    plain.push_back(RunRound(runner, batch, 0, flags, vocab, {}, &plain_out));
    spec.push_back(RunRound(runner, batch, k, flags, vocab, oracle, &spec_out));
    if (spec_out != oracle) Die("speculative tokens differ from plain decoding's");
  }
  auto median = [](std::vector<Round>& rounds) {
    std::sort(rounds.begin(), rounds.end(),
              [](const Round& a, const Round& b) { return a.decode_s < b.decode_s; });
    return rounds[rounds.size() / 2];
  };
  return Pair{median(plain), median(spec)};
}

double ExpectedTokensPerStep(double acceptance, int k) {
  if (acceptance >= 1.0) return k + 1;
  return (1.0 - std::pow(acceptance, k + 1)) / (1.0 - acceptance);
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  int vocab = 0;
  std::unique_ptr<ModelRunner> runner = LoadRunner(flags, &vocab);
  std::printf("model %s, %d threads, prompt %d, %d output tokens per sequence\n",
              flags.model.c_str(), flags.threads, flags.prompt, flags.tokens);
  std::printf("%5s %3s %11s %11s %7s %12s %9s %9s %9s\n", "batch", "k", "plain_tok/s", "spec_tok/s",
              "ratio", "verify/plain", "x@a=0.8", "x@a=0.6", "x@a=0.4");
  for (int batch : flags.batches) {
    std::vector<std::vector<int>> oracle;
    RunRound(*runner, batch, 0, flags, vocab, {}, &oracle);
    const double decoded = static_cast<double>(batch) * (flags.tokens - 1);
    for (int k : flags.ks) {
      const Pair pair = MedianRounds(*runner, batch, k, flags, vocab, oracle);
      const double step_ratio =
          (pair.spec.decode_s / pair.spec.steps) / (pair.plain.decode_s / pair.plain.steps);
      std::printf("%5d %3d %11.1f %11.1f %6.2fx %12.2f", batch, k, decoded / pair.plain.decode_s,
                  decoded / pair.spec.decode_s, pair.plain.decode_s / pair.spec.decode_s,
                  step_ratio);
      for (double a : {0.8, 0.6, 0.4}) {
        std::printf(" %8.2fx", ExpectedTokensPerStep(a, k) / step_ratio);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
