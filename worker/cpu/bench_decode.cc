// The CPU worker's model step in-process, without pagoda-server or any RPC:
// for each batch size B, B sequences prefill a prompt together and then
// decode greedily, one token each per step, through the same
// ModelRunner::ExecuteStep the worker serves. Prints prefill and decode time,
// output tokens/s (what llama.cpp's batched bench calls S_TG and S) of the
// median of --rounds rounds after a warm-up, and the
// decode step's weight bytes per second against the memory read bandwidth of
// this machine measured in the same run (the same thread count streaming one
// buffer larger than the caches): at batch 1 a decode step reads every weight
// once, so that ratio says how near the memory limit it runs.
// pagoda-bench through the service minus this is the service's cost.
//
//   bench_cpu_decode --model DIR [--threads 2] [--batches 1,8,32] [--prompt 64]
//                    [--tokens 64] [--rounds 3]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/flags.h"
#include "common/model_config.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/cpu/simd.h"
#include "worker/model_runner.h"

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

struct Flags {
  std::string model;
  int threads = 2;
  std::vector<int> batches = {1, 8, 32};
  int prompt = 64;
  int tokens = 64;
  int rounds = 3;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Die("missing value after " + arg);
    const std::string value = argv[++i];
    int number = 0;
    const bool numeric = absl::SimpleAtoi(value, &number) && number > 0;
    if (arg == "--model") {
      flags.model = value;
    } else if (arg == "--batches") {
      auto batches = ParsePositiveIntList(value);
      if (!batches) Die("bad --batches " + value);
      flags.batches = *std::move(batches);
    } else if (!numeric) {
      Die("bad value for " + arg + ": " + value);
    } else if (arg == "--threads") {
      flags.threads = number;
    } else if (arg == "--prompt") {
      flags.prompt = number;
    } else if (arg == "--tokens") {
      flags.tokens = number;
    } else if (arg == "--rounds") {
      flags.rounds = number;
    } else {
      Die("unknown flag " + arg);
    }
  }
  if (flags.model.empty()) Die("--model DIR is required");
  return flags;
}

// GB/s of `threads` threads each summing its part of a buffer far larger
// than the caches, with the worker's own SIMD dot product (best of a few).
double ReadBandwidth(int threads) {
  const size_t n = size_t{256} << 20 >> 2;  // 256 MiB of floats.
  // 64-byte aligned like the backend's buffers, so no load splits a line.
  std::unique_ptr<float, decltype(&std::free)> buffer(
      static_cast<float*>(std::aligned_alloc(64, n * sizeof(float))), &std::free);
  std::fill_n(buffer.get(), n, 1.0f);
  const SimdKernels& simd = BestSimdKernels();
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto start = Clock::now();
    std::vector<std::thread> pool;
    std::vector<float> sums(threads);
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const size_t begin = n * t / threads, end = n * (t + 1) / threads;
        // a . a reads the range once (the second operand hits L1).
        sums[t] = simd.dot_f32(buffer.get() + begin, buffer.get() + begin, end - begin);
      });
    }
    for (std::thread& thread : pool) thread.join();
    best = std::max(best, n * sizeof(float) / Seconds(start) / 1e9);
    if (sums[0] != static_cast<float>(n / threads) && sums[0] <= 0) Die("bad sum");
  }
  return best;
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

// Bytes a decode step reads from weights: every matrix once (the embedding
// table only for its B rows, ignored), in the checkpoint's element size.
double DecodeWeightBytes(const ModelConfig& c, const std::string& model_dir) {
  const double hidden = c.hidden_size, inter = c.intermediate_size, vocab = c.vocab_size;
  const double q_dim = static_cast<double>(c.num_attention_heads) * c.head_dim;
  const double kv_dim = static_cast<double>(c.num_key_value_heads) * c.head_dim;
  const double per_layer = hidden * (q_dim + 2 * kv_dim) + q_dim * hidden + 3 * hidden * inter;
  const double matrices = c.num_hidden_layers * per_layer + vocab * hidden;
  const double stored =
      c.num_hidden_layers * per_layer + vocab * hidden * (c.tie_word_embeddings ? 1 : 2);
  double file_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir)) {
    if (entry.path().extension() == ".safetensors") file_bytes += entry.file_size();
  }
  const double element = file_bytes / stored > 3 ? 4 : 2;
  return matrices * element;
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  absl::StatusOr<ModelConfig> config = LoadModelConfig(flags.model);
  if (!config.ok()) Die(std::string(config.status().message()));
  const int max_batch = *std::max_element(flags.batches.begin(), flags.batches.end());
  const int blocks_per_seq = (flags.prompt + flags.tokens + kBlockSize - 1) / kBlockSize;

  std::unique_ptr<ModelRunner> runner = CreateCpuModelRunner();
  v1::LoadModelRequest load;
  load.set_model_dir(flags.model);
  load.set_block_size(kBlockSize);
  load.set_device("cpu");
  load.set_cpu_threads(flags.threads);
  load.set_max_num_seqs(max_batch);
  load.set_max_num_batched_tokens(std::max(2048, max_batch * flags.prompt));
  load.set_kv_cache_memory_bytes(int64_t{1} << 30);
  absl::StatusOr<v1::LoadModelResponse> loaded = runner->LoadModel(load);
  if (!loaded.ok()) Die(std::string(loaded.status().message()));
  if (loaded->num_gpu_blocks() < max_batch * blocks_per_seq) Die("KV cache too small");
  v1::InitCacheRequest cache;
  cache.set_num_gpu_blocks(max_batch * blocks_per_seq);
  if (absl::Status status = runner->InitCache(cache); !status.ok()) {
    Die(std::string(status.message()));
  }
  const double weight_bytes = DecodeWeightBytes(*config, flags.model);
  const double read_gbs = ReadBandwidth(flags.threads);
  std::printf(
      "model %s: a decode step reads %.1f MB of weights; %d threads; memory read %.1f GB/s\n",
      flags.model.c_str(), weight_bytes / 1e6, flags.threads, read_gbs);
  std::printf("%5s %10s %10s %12s %12s %10s %8s\n", "batch", "prefill_ms", "step_ms",
              "decode_tok/s", "e2e_out_tok/s", "weight_GB/s", "of_read");
  int64_t step_id = 0;
  for (int batch : flags.batches) {
    RunRound(*runner, batch, flags, loaded->vocab_size(), &step_id);  // Warm-up.
    std::vector<Timing> rounds;
    for (int r = 0; r < flags.rounds; ++r) {
      rounds.push_back(RunRound(*runner, batch, flags, loaded->vocab_size(), &step_id));
    }
    // The median round: this machine's memory bandwidth swings between runs,
    // and the best round would flatter.
    std::sort(rounds.begin(), rounds.end(), [](const Timing& a, const Timing& b) {
      return a.prefill_s + a.decode_s < b.prefill_s + b.decode_s;
    });
    const Timing best = rounds[rounds.size() / 2];
    const double step_s = best.decode_s / (flags.tokens - 1);  // Of the median round.
    const double gbs = weight_bytes / step_s / 1e9;
    std::printf("%5d %10.2f %10.3f %12.1f %12.1f %10.1f %7.0f%%\n", batch, best.prefill_s * 1e3,
                step_s * 1e3, batch / step_s,
                batch * flags.tokens / (best.prefill_s + best.decode_s), gbs, 100 * gbs / read_gbs);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
