// The decode step with LoRA on the local GPU (issue 48's speed goal): one
// eager step of `--batch` sequences spread round-robin over `--adapters`
// adapters of rank `--rank` on all seven projections plus the base model,
// against the same step with every sequence on the base model, measured in
// the same run (both eager: LoRA steps never replay a graph, docs/lora.md).
// Prints both medians and the ratio of output tokens/s (the goal is at
// least 0.8), and the time to copy one adapter into a device slot.
//
//   bench_lora_step --model DIR [--batch 32] [--adapters 4] [--rank 16]
//                   [--context 1024] [--iters 20]
//
// The adapters are random (values as trained adapters' scale), made in the
// process: the timing does not depend on their values.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_lora_slots.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

ABSL_FLAG(std::string, model, "", "Model directory (required).");
ABSL_FLAG(int, batch, 32, "Sequences in the step.");
ABSL_FLAG(int, adapters, 4, "Adapters the sequences are spread over (with the base model).");
ABSL_FLAG(int, rank, 16, "The adapters' LoRA rank.");
ABSL_FLAG(int, context, 1024, "Tokens of cache per sequence.");
ABSL_FLAG(int, iters, 20, "Timed steps of each kind (the median is printed).");

namespace pagoda::worker {
namespace {

constexpr int kBlockSize = 16;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_lora_step: %s\n", message.c_str());
  std::exit(1);
}

// The command line's values (their defaults are the ABSL_FLAGs').
struct Args {
  std::string model;
  int batch;
  int adapters;
  int rank;
  int context;
  int iters;
};

Args ParseArgs(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_lora_step",
                                "bench_lora_step --model DIR [--batch N] [--adapters N] [--rank N] "
                                "[--context N] [--iters N]"});
  const Args args{.model = absl::GetFlag(FLAGS_model),
                  .batch = absl::GetFlag(FLAGS_batch),
                  .adapters = absl::GetFlag(FLAGS_adapters),
                  .rank = absl::GetFlag(FLAGS_rank),
                  .context = absl::GetFlag(FLAGS_context),
                  .iters = absl::GetFlag(FLAGS_iters)};
  bench::CheckFlags("bench_lora_step", {bench::Required("model", args.model),
                                        flag_check::Range("batch", args.batch, 1, 4096),
                                        flag_check::Range("adapters", args.adapters, 1, 256),
                                        flag_check::Range("rank", args.rank, 1, 512),
                                        flag_check::Range("context", args.context, 1, 1 << 20),
                                        flag_check::Range("iters", args.iters, 1, 10000)});
  return args;
}

// `batch` sequences of `context` tokens decoding their last token, each on
// its own blocks; sequence s in slot s % (adapters + 1) (0: the base model),
// or all in slot 0.
FlatBatch DecodeBatch(const Args& args, int vocab, bool with_adapters) {
  const int blocks = (args.context + kBlockSize - 1) / kBlockSize;
  FlatBatch flat;
  flat.max_blocks_per_seq = blocks;
  flat.query_start.push_back(0);
  for (int s = 0; s < args.batch; ++s) {
    flat.input_ids.push_back((s * 7919) % vocab);
    flat.positions.push_back(args.context - 1);
    flat.slot_mapping.push_back((s * blocks) * kBlockSize + args.context - 1);
    flat.query_start.push_back(s + 1);
    flat.context_lens.push_back(args.context);
    for (int b = 0; b < blocks; ++b) flat.block_tables.push_back(s * blocks + b);
    flat.logits_indices.push_back(s);
    flat.sample_sequences.push_back(s);
    flat.temperatures.push_back(0.0f);
    flat.top_k.push_back(0);
    flat.top_p.push_back(1.0f);
    flat.seeds.push_back(0);
    flat.sample_indices.push_back(0);
    flat.num_logprobs.push_back(0);
    flat.lora_slots.push_back(with_adapters ? s % (args.adapters + 1) : 0);
  }
  flat.uses_lora = with_adapters;
  return flat;
}

// A random adapter of `rank` on every projection of every layer.
LoraAdapter RandomAdapter(const LoraSlots& slots, int rank, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  LoraAdapter adapter;
  adapter.config.rank = rank;
  adapter.scale = 0.5f;
  adapter.layers.resize(slots.num_layers());
  for (auto& layer : adapter.layers) {
    for (LoraModule module : kAllLoraModules) {
      const LinearShape shape = slots.shape(module);
      LoraMatrices m{rank, shape.in, shape.out, std::vector<float>(rank * shape.in),
                     std::vector<float>(shape.out * rank)};
      for (float& v : m.a) v = normal(rng) / std::sqrt(static_cast<float>(shape.in));
      for (float& v : m.b) v = 0.2f * normal(rng) / std::sqrt(static_cast<float>(rank));
      layer[static_cast<int>(module)] = std::move(m);
    }
  }
  return adapter;
}

template <typename F>
double MedianMs(int iters, F&& step) {
  std::vector<double> ms;
  for (int i = 0; i < iters + 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    const double took =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i >= 3) ms.push_back(took);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  auto created = CudaBackend::Create(0, DType::kBF16);
  if (!created.ok()) Die(created.status().ToString());
  std::unique_ptr<CudaBackend> backend = *std::move(created);
  CudaBackend* device = backend.get();
  auto communicator = CreateSingleRankCommunicator();
  LlamaLoadOptions options{.weight_dtype = DType::kBF16,
                           .max_num_batched_tokens = args.batch,
                           .max_num_seqs = args.batch,
                           .block_size = kBlockSize,
                           .max_loras = args.adapters,
                           .max_lora_rank = args.rank};
  options.lora_device = [device](
                            const LoraSlots& slots,
                            int max_tokens) -> absl::StatusOr<std::shared_ptr<LoraDeviceSlots>> {
    auto made = CudaLoraSlots::Create(device, slots, max_tokens);
    if (!made.ok()) return made.status();
    return std::shared_ptr<LoraDeviceSlots>(*std::move(made));
  };
  auto loaded = LlamaModel::Load(args.model, backend.get(), communicator.get(), options);
  if (!loaded.ok()) Die(loaded.status().ToString());
  std::unique_ptr<LlamaModel> model = *std::move(loaded);
  LoraSlots& slots = *model->lora_loader()->slots();
  std::vector<double> load_ms;
  for (int slot = 1; slot <= args.adapters; ++slot) {
    const LoraAdapter adapter = RandomAdapter(slots, args.rank, slot);
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status status = slots.Load(slot, adapter); !status.ok()) Die(status.ToString());
    load_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(load_ms.begin(), load_ms.end());

  const KvCacheShape shape = model->CacheShape(kBlockSize, DType::kBF16);
  const int blocks_per_seq = (args.context + kBlockSize - 1) / kBlockSize;
  CacheEngine cache(backend.get(), shape, args.batch * blocks_per_seq, 0);
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const size_t bytes = shape.bytes_per_layer_block() * args.batch * blocks_per_seq;
    cudaMemsetAsync(cache.layer(layer).key, 0x3c, bytes, backend->stream());
    cudaMemsetAsync(cache.layer(layer).value, 0x3b, bytes, backend->stream());
  }
  const int vocab = model->config().vocab_size;
  SampleResults samples;
  auto step_ms = [&](bool with_adapters) {
    const FlatBatch flat = DecodeBatch(args, vocab, with_adapters);
    return MedianMs(args.iters, [&] {
      model->PinLoraSlots();
      absl::StatusOr<ForwardOutput> out = model->Forward(flat, &cache);
      if (!out.ok()) Die(out.status().ToString());
      backend->Sample(out->logits, out->sampling, &samples);
      if (!backend->status().ok()) Die(backend->status().ToString());
    });
  };
  const double base_ms = step_ms(false);
  const double lora_ms = step_ms(true);
  std::printf("%s; batch %d, context %d, %d adapters of rank %d on all 7 projections + base\n",
              backend->DeviceDescription().c_str(), args.batch, args.context, args.adapters,
              args.rank);
  std::printf("%12s %12s %12s %14s\n", "base ms", "lora ms", "tok/s ratio", "load ms (med)");
  std::printf("%12.3f %12.3f %12.3f %14.2f\n", base_ms, lora_ms, base_ms / lora_ms,
              load_ms[load_ms.size() / 2]);
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
