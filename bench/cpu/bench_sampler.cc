// The CPU sampler's time per step with and without logits processing
// (issue 21's measure): 256 sequences, 2k generated tokens each, a 128k
// vocabulary, on 2 threads, through CpuBackend::Sample as the worker calls
// it. Penalties touch the counted tokens (sparse edits, in place), not the
// vocabulary, so the goal is under 5% over plain sampling. A benchmark, not a
// test: prints both figures and their ratio.
//
//   build/bin/bench_cpu_sampler [--rows 256] [--vocab 128256] [--output 2048]
//                               [--threads 2] [--steps 20] [--temperature 0.8]
//                               [--peak 0] [--top-p 1] [--top-k 0]
//
// Logits are N(0, 3); --peak P adds P to one token a row, as a model's
// confident step puts its choice far above the rest (a drawn row then skips
// the noise of most of the vocabulary).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "common/logits_processing.h"
#include "worker/backend.h"
#include "worker/cpu/cpu_backend.h"

ABSL_FLAG(int, rows, 256, "Sequences sampled a step.");
ABSL_FLAG(int, vocab, 128256, "Vocabulary size.");
ABSL_FLAG(int, output, 2048, "Tokens each sequence has generated (what the penalties count).");
ABSL_FLAG(int, threads, 2, "CPU backend threads.");
ABSL_FLAG(int, steps, 20, "Timed steps of each kind.");
ABSL_FLAG(float, temperature, 0.8f, "Sampling temperature (0: greedy).");
ABSL_FLAG(float, peak, 0.0f, "Added to one token's logit a row (a confident step).");
ABSL_FLAG(float, top_p, 1.0f, "Top-p of every row, in (0, 1].");
ABSL_FLAG(int, top_k, 0, "Top-k of every row (0: off).");

namespace pagoda::worker {
namespace {

// The command line's values (their defaults are the ABSL_FLAGs').
struct Options {
  int rows, vocab, output, threads, steps;
  float temperature;
  float peak;
  float top_p;
  int top_k;
};

Options ParseOptions(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_cpu_sampler",
                                "bench_cpu_sampler [--rows N] [--vocab N] [--output N] "
                                "[--threads N] [--steps N] [--temperature T] [--peak P] "
                                "[--top-p P] [--top-k K]"});
  const Options o{.rows = absl::GetFlag(FLAGS_rows),
                  .vocab = absl::GetFlag(FLAGS_vocab),
                  .output = absl::GetFlag(FLAGS_output),
                  .threads = absl::GetFlag(FLAGS_threads),
                  .steps = absl::GetFlag(FLAGS_steps),
                  .temperature = absl::GetFlag(FLAGS_temperature),
                  .peak = absl::GetFlag(FLAGS_peak),
                  .top_p = absl::GetFlag(FLAGS_top_p),
                  .top_k = absl::GetFlag(FLAGS_top_k)};
  bench::CheckFlags(
      "bench_cpu_sampler",
      {flag_check::Range("rows", o.rows, 1, 4096), flag_check::Range("vocab", o.vocab, 1, 1 << 20),
       flag_check::Range("output", o.output, 1, 1 << 20), bench::Threads(o.threads),
       flag_check::Range("steps", o.steps, 1, 100000),
       flag_check::RealRange("temperature", o.temperature, 0, 100, true),
       flag_check::RealRange("peak", o.peak, -1000, 1000, true),
       flag_check::RealRange("top-p", o.top_p, 0, 1, false),
       flag_check::Range("top-k", o.top_k, 0, o.vocab)});
  return o;
}

// Edits as a sequence with `output` generated tokens (Zipf-like, so tokens
// repeat) and repetition, frequency and presence penalties would send them.
std::vector<LogitEdit> MakeEdits(const Options& o, std::vector<int32_t>* offsets) {
  std::mt19937 rng(7);
  std::vector<LogitEdit> edits;
  offsets->assign(1, 0);
  std::vector<int32_t> counts(o.vocab, 0);
  for (int r = 0; r < o.rows; ++r) {
    std::fill(counts.begin(), counts.end(), 0);
    std::geometric_distribution<int> zipfish(0.002);
    for (int t = 0; t < o.output; ++t) ++counts[zipfish(rng) % o.vocab];
    for (int id = 0; id < o.vocab; ++id) {
      if (counts[id] > 0) {
        edits.push_back(LogitEdit{.token_id = id, .output_count = counts[id], .flags = kLogitSeen});
      }
    }
    offsets->push_back(static_cast<int32_t>(edits.size()));
  }
  return edits;
}

// Seconds per step of each batch, timing them in alternation so that the
// load of a shared machine weighs on both alike.
std::pair<double, double> SecondsPerStep(Backend& backend, const Options& o,
                                         std::vector<float>& logits,
                                         const std::vector<float>& pristine,
                                         const SamplingBatch& plain,
                                         const SamplingBatch& penalized) {
  SampleResults results;
  double totals[2] = {0, 0};
  for (int step = 0; step < o.steps + 1; ++step) {
    for (int which = 0; which < 2; ++which) {
      // Fresh logits each step (processing rewrites edited entries in
      // place), copied outside the timed region.
      std::memcpy(logits.data(), pristine.data(), logits.size() * sizeof(float));
      const Tensor tensor{.dtype = DType::kF32,
                          .shape = {o.rows, o.vocab, 0, 0},
                          .rank = 2,
                          .data = logits.data()};
      const auto start = std::chrono::steady_clock::now();
      backend.Sample(tensor, which == 0 ? plain : penalized, &results);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step > 0) totals[which] += seconds;  // Step 0 warms the threads and buffers.
    }
  }
  return {totals[0] / o.steps, totals[1] / o.steps};
}

int Run(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  std::unique_ptr<Backend> backend = CreateCpuBackend(o.threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> pristine(static_cast<size_t>(o.rows) * o.vocab);
  for (float& x : pristine) x = normal(rng);
  for (int r = 0; r < o.rows; ++r) {
    pristine[static_cast<size_t>(r) * o.vocab + static_cast<size_t>(r) * 7919 % o.vocab] += o.peak;
  }
  std::vector<float> logits(pristine.size());
  std::vector<float> temperatures(o.rows, o.temperature), top_p(o.rows, o.top_p);
  std::vector<float> min_p(o.rows, 0.0f);
  std::vector<int32_t> top_k(o.rows, o.top_k), offsets;
  std::vector<uint64_t> seeds(o.rows), indices(o.rows, 5);
  for (int r = 0; r < o.rows; ++r) seeds[r] = 1000 + r;
  const std::vector<LogitEdit> edits = MakeEdits(o, &offsets);
  const std::vector<LogitPenalties> penalties(
      o.rows, LogitPenalties{.repetition = 1.1f, .frequency = 0.5f, .presence = 0.5f});
  SamplingBatch plain{.num_rows = o.rows,
                      .temperatures = temperatures.data(),
                      .top_k = top_k.data(),
                      .top_p = top_p.data(),
                      .seeds = seeds.data(),
                      .sample_indices = indices.data(),
                      .min_p = min_p.data()};
  SamplingBatch penalized = plain;
  penalized.penalties = penalties.data();
  penalized.edit_offsets = offsets.data();
  penalized.edits = edits.data();
  penalized.has_edits = true;
  const auto [without, with] = SecondsPerStep(*backend, o, logits, pristine, plain, penalized);
  std::printf(
      "rows %d, vocab %d, %d generated tokens each (%.0f distinct per row), %d threads, "
      "temperature %.2f, peak %.1f, top_p %.2f, top_k %d\n",
      o.rows, o.vocab, o.output, static_cast<double>(edits.size()) / o.rows, o.threads,
      o.temperature, o.peak, o.top_p, o.top_k);
  std::printf("without penalties: %.3f ms/step\n", without * 1e3);
  std::printf("with penalties:    %.3f ms/step\n", with * 1e3);
  std::printf("ratio: %.4f (%+.2f%%)\n", with / without, (with / without - 1) * 100);
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Run(argc, argv); }
