// The CPU worker's model step in-process, without pagoda-server or any RPC:
// for each batch size B, B sequences prefill a prompt together and then
// decode greedily, one token each per step, through the same
// ModelRunner::ExecuteStep the worker serves. Prints the median of --rounds
// rounds after a warm-up, each figure beside its floor, the least time the
// work could take on this machine as measured in the same run
// (machine_floor.h):
// - prefill: GFLOP/s (weights and attention) against the FMA peak;
// - decode: the step against the bytes it must read (every weight once, and
//   each sequence's K/V at its mean context) at the best streaming read
//   bandwidth, huge or 4 KiB pages; at batch 1 that is the weights alone.
// It also prints how much of the weights the kernel keeps on huge pages.
// pagoda-bench through the service minus this is the service's cost.
//
//   bench_cpu_decode --model DIR [--threads 2] [--batches 1,8,32] [--prompt 64]
//                    [--tokens 64] [--rounds 3] [--kv-cache-dtype auto|float32|bfloat16|float16]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "bench/cpu/machine_floor.h"
#include "common/dtype.h"
#include "common/flag_checks.h"
#include "common/model_config.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/cpu/host_memory.h"
#include "worker/cpu/simd.h"
#include "worker/model_runner.h"

ABSL_FLAG(std::string, model, "", "Model directory (required).");
ABSL_FLAG(int, threads, 2, "CPU backend threads.");
ABSL_FLAG(pagoda::bench::PositiveIntList, batches, (pagoda::bench::PositiveIntList{{1, 8, 32}}),
          "Batch sizes to time, comma separated.");
ABSL_FLAG(int, prompt, 64, "Prompt tokens per sequence.");
ABSL_FLAG(int, tokens, 64, "Tokens each sequence generates (2 or more).");
ABSL_FLAG(int, rounds, 3, "Timed rounds per batch size (the median is printed).");
ABSL_FLAG(std::string, kv_cache_dtype, "auto", "KV cache dtype: auto, float32, bfloat16, float16.");

namespace pagoda::worker {
namespace {

namespace v1 = ::pagoda::worker::v1;
using Clock = std::chrono::steady_clock;

constexpr int kBlockSize = 16;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_cpu_decode: %s\n", message.c_str());
  std::exit(1);
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// The command line's values (their defaults are the ABSL_FLAGs').
struct Flags {
  std::string model;
  int threads;
  std::vector<int> batches;
  int prompt;
  int tokens;
  int rounds;
  std::string kv_cache_dtype;
  size_t kv_element_bytes = 4;  // Of kv_cache_dtype (auto is f32 on CPU).
};

Flags ParseFlags(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_cpu_decode",
                                "bench_cpu_decode --model DIR [--threads N] [--batches 1,8,32] "
                                "[--prompt N] [--tokens N] [--rounds N] [--kv-cache-dtype DTYPE]"});
  Flags flags{.model = absl::GetFlag(FLAGS_model),
              .threads = absl::GetFlag(FLAGS_threads),
              .batches = absl::GetFlag(FLAGS_batches).values,
              .prompt = absl::GetFlag(FLAGS_prompt),
              .tokens = absl::GetFlag(FLAGS_tokens),
              .rounds = absl::GetFlag(FLAGS_rounds),
              .kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype)};
  absl::StatusOr<std::optional<DType>> dtype = ParseKvCacheDTypeFlag(flags.kv_cache_dtype);
  bench::CheckFlags("bench_cpu_decode",
                    {bench::Required("model", flags.model), bench::Threads(flags.threads),
                     flag_check::Range("prompt", flags.prompt, 1, 1 << 20),
                     flag_check::Range("tokens", flags.tokens, 2, 1 << 20),
                     flag_check::Range("rounds", flags.rounds, 1, 1000), dtype.status()});
  flags.kv_element_bytes = DTypeSize(dtype->value_or(DType::kF32));
  return flags;
}

struct Timing {
  double prefill_s = 0;
  double decode_s = 0;
};

// One round: B sequences prefill `prompt` tokens together, then decode
// `tokens` - 1 steps (the prefill step samples the first output token).
Timing RunRound(ModelRunner& runner, int batch, const Flags& flags, int vocab, int64_t* step_id) {
  const int blocks_per_seq = (flags.prompt + flags.tokens + kBlockSize - 1) / kBlockSize;
  std::vector<int> last(batch);
  auto step = [&](bool prefill, int position) {
    v1::StepPlan plan;
    plan.set_step_id((*step_id)++);
    for (int s = 0; s < batch; ++s) {
      v1::SequenceStep* seq = plan.add_sequences();
      seq->set_seq_id(s);
      if (prefill) {
        for (int i = 0; i < flags.prompt; ++i) seq->add_token_ids((s * 131 + i * 7 + 1) % vocab);
      } else {
        seq->add_token_ids(last[s]);
      }
      seq->set_start_position(position);
      for (int b = 0; b < blocks_per_seq; ++b) seq->add_block_table(s * blocks_per_seq + b);
      seq->set_do_sample(true);
      seq->set_sample_index(prefill ? 0 : position - flags.prompt + 1);
    }
    absl::StatusOr<v1::StepResult> result = runner.ExecuteStep(plan);
    if (!result.ok()) Die(std::string(result.status().message()));
    if (result->tokens_size() != batch) Die("a step sampled the wrong number of tokens");
    for (int s = 0; s < batch; ++s) last[s] = result->tokens(s).token_id();
  };
  Timing timing;
  auto start = Clock::now();
  step(/*prefill=*/true, 0);
  timing.prefill_s = Seconds(start);
  start = Clock::now();
  for (int t = 1; t < flags.tokens; ++t) step(/*prefill=*/false, flags.prompt + t - 1);
  timing.decode_s = Seconds(start);
  return timing;
}

// The work of one round's steps, from the model's shape: what the floors
// are computed from.
struct ModelWork {
  double weight_bytes = 0;        // Every matrix once (the embedding's B rows ignored).
  double kv_bytes_per_token = 0;  // K and V of one context token, every layer.
  double flops_per_token = 0;     // Multiply-adds x 2 of the matrices a prompt token goes through.
  double attention_flops_per_pair = 0;  // Scores and weighted values of one (query, key) pair.
  double logits_flops = 0;              // The lm_head for one sampled row.
};

ModelWork WorkOf(const ModelConfig& c, const std::string& model_dir, size_t kv_element_bytes) {
  const double hidden = c.hidden_size, inter = c.intermediate_size, vocab = c.vocab_size;
  const double q_dim = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv_dim = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double per_layer = hidden * (q_dim + 2 * kv_dim) + q_dim * hidden + 3 * hidden * inter;
  const double layers = c.num_hidden_layers;
  const double stored = layers * per_layer + vocab * hidden * (c.tie_word_embeddings ? 1 : 2);
  double file_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir)) {
    if (entry.path().extension() == ".safetensors") file_bytes += entry.file_size();
  }
  const double element = file_bytes / stored > 3 ? 4 : 2;
  return ModelWork{.weight_bytes = (layers * per_layer + vocab * hidden) * element,
                   .kv_bytes_per_token = layers * 2 * kv_dim * kv_element_bytes,
                   .flops_per_token = 2 * layers * per_layer,
                   .attention_flops_per_pair = layers * 4 * q_dim,
                   .logits_flops = 2 * vocab * hidden};
}

// Loads the model with a KV cache for every sequence's prompt and output.
std::unique_ptr<ModelRunner> LoadRunner(const Flags& flags, const ModelWork& work, int* vocab) {
  const int max_batch = *std::max_element(flags.batches.begin(), flags.batches.end());
  const int blocks_per_seq = (flags.prompt + flags.tokens + kBlockSize - 1) / kBlockSize;
  const int64_t blocks = static_cast<int64_t>(max_batch) * blocks_per_seq;
  std::unique_ptr<ModelRunner> runner = CreateCpuModelRunner();
  v1::LoadModelRequest load;
  load.set_model_dir(flags.model);
  load.set_block_size(kBlockSize);
  load.set_device("cpu");
  load.set_cpu_threads(flags.threads);
  load.set_kv_cache_dtype(flags.kv_cache_dtype);
  load.set_max_num_seqs(max_batch);
  load.set_max_num_batched_tokens(std::max(2048, max_batch * flags.prompt));
  load.set_kv_cache_memory_bytes(
      static_cast<int64_t>(blocks * kBlockSize * work.kv_bytes_per_token * 1.1) + (64 << 20));
  absl::StatusOr<v1::LoadModelResponse> loaded = runner->LoadModel(load);
  if (!loaded.ok()) Die(std::string(loaded.status().message()));
  if (loaded->num_gpu_blocks() < blocks) Die("KV cache too small");
  v1::InitCacheRequest cache;
  cache.set_num_gpu_blocks(blocks);
  if (absl::Status status = runner->InitCache(cache); !status.ok()) {
    Die(std::string(status.message()));
  }
  *vocab = loaded->vocab_size();
  return runner;
}

// The median of `rounds` rounds after a warm-up: this machine's memory
// bandwidth swings between runs, and the best round would flatter.
Timing MedianRound(ModelRunner& runner, int batch, const Flags& flags, int vocab,
                   int64_t* step_id) {
  RunRound(runner, batch, flags, vocab, step_id);  // Warm-up.
  std::vector<Timing> rounds;
  for (int r = 0; r < flags.rounds; ++r) {
    rounds.push_back(RunRound(runner, batch, flags, vocab, step_id));
  }
  std::sort(rounds.begin(), rounds.end(), [](const Timing& a, const Timing& b) {
    return a.prefill_s + a.decode_s < b.prefill_s + b.decode_s;
  });
  return rounds[rounds.size() / 2];
}

void PrintHeader(const Flags& flags, const ModelWork& work, const ReadBandwidth& read,
                 double peak_gflops) {
  const HugePageUsage pages = CurrentHugePageUsage();
  std::printf("model %s: a decode step reads %.1f MB of weights; %d threads\n", flags.model.c_str(),
              work.weight_bytes / 1e6, flags.threads);
  std::printf(
      "memory read %.1f GB/s on huge pages, %.1f GB/s on 4 KiB pages; FMA peak %.1f GFLOP/s\n",
      read.huge_pages_gbs, read.small_pages_gbs, peak_gflops);
  std::printf("weights and workspace: %.1f MB resident, %.1f MB (%.0f%%) on huge pages\n",
              pages.resident_bytes / 1e6, pages.huge_bytes / 1e6,
              100.0 * pages.huge_bytes / std::max<size_t>(1, pages.resident_bytes));
  std::printf("%5s %10s %9s %7s %10s %9s %7s %12s %13s\n", "batch", "prefill_ms", "GFLOP/s",
              "of_peak", "step_ms", "floor_ms", "of_floor", "decode_tok/s", "e2e_out_tok/s");
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  absl::StatusOr<ModelConfig> config = LoadModelConfig(flags.model);
  if (!config.ok()) Die(std::string(config.status().message()));
  const ModelWork work = WorkOf(*config, flags.model, flags.kv_element_bytes);
  int vocab = 0;
  std::unique_ptr<ModelRunner> runner = LoadRunner(flags, work, &vocab);
  const ReadBandwidth read = MeasureReadBandwidth(flags.threads);
  const double peak_gflops = MeasureFmaPeakGflops(flags.threads);
  PrintHeader(flags, work, read, peak_gflops);
  int64_t step_id = 0;
  for (int batch : flags.batches) {
    const Timing median = MedianRound(*runner, batch, flags, vocab, &step_id);
    const double p = flags.prompt;
    const double prefill_flops = batch * (p * work.flops_per_token + work.logits_flops +
                                          p * (p + 1) / 2 * work.attention_flops_per_pair);
    const double prefill_gflops = prefill_flops / median.prefill_s / 1e9;
    const double step_s = median.decode_s / (flags.tokens - 1);
    const double mean_context = flags.prompt + flags.tokens / 2.0;
    const double step_bytes = work.weight_bytes + batch * mean_context * work.kv_bytes_per_token;
    const double floor_s = step_bytes / (read.best() * 1e9);
    std::printf("%5d %10.2f %9.1f %6.0f%% %10.3f %9.3f %7.0f%% %12.1f %13.1f\n", batch,
                median.prefill_s * 1e3, prefill_gflops, 100 * prefill_gflops / peak_gflops,
                step_s * 1e3, floor_s * 1e3, 100 * floor_s / step_s, batch / step_s,
                batch * flags.tokens / (median.prefill_s + median.decode_s));
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
