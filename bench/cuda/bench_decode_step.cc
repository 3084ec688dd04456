// Decode step time of a whole model on the local GPU, eager and replayed from
// a CUDA graph, against its floor: (weight bytes + KV bytes read) / the
// device-to-device copy bandwidth measured in the same run (bytes read +
// written, METHOD.md). Each sequence has `--context` tokens of cache (filled
// with a non-zero bf16 pattern: timings never on zeros) and decodes one token.
// The graphs are captured twice: as the server captures them, with
// cuBLASLt's heuristic algorithm for every GEMM ("graph ms", against the
// floor; eager runs those too), then with algorithms picked by timing
// during the warm-up ("timed ms", GemmContext::set_timing), to see whether
// timing would pay on this GPU. --timed 0 leaves the timed graphs out.
// --fusions 1 captures them a third time with issue 49's decode-step fusions
// on (CudaDecodeFusions::All: rotary fused into the cache write, add +
// RMSNorm without its copy, GEMMs without split-K where they time equal):
// "fused ms", its ratio to the floor and to "graph ms" in the same run.
//
//   bench_decode_step --model DIR [--batches 1,64,256] [--context 1024] [--iters 20]
//                     [--quantization fp8] [--kv-cache-dtype fp8] [--timed 0|1]
//                     [--fusions 0|1]
//
// --quantization fp8 quantizes a dense checkpoint's linears to FP8 at load
// (the CUDA FP8 W8A8 linears; a quantized checkpoint's own method is used
// without it) and --kv-cache-dtype fp8 caches K/V as FP8 E4M3: the floor
// then counts their bytes (issue 45's FP8 decode step against its floor).
//
// The model is any checkpoint the worker loads; scripts/make_bench_model.py
// writes a Llama-3-8B-shaped one with random weights. Prints one line per
// batch size; exits non-zero on any failure.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "bench/common/bench_flags.h"
#include "common/flag_checks.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_graph_runner.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

ABSL_FLAG(std::string, model, "", "Model directory (required).");
ABSL_FLAG(pagoda::bench::PositiveIntList, batches, (pagoda::bench::PositiveIntList{{1, 64, 256}}),
          "Batch sizes to time, comma separated.");
ABSL_FLAG(int, context, 1024, "Tokens of cache per sequence.");
ABSL_FLAG(int, iters, 20, "Timed steps per figure (the median is printed).");
ABSL_FLAG(std::string, quantization, "",
          "fp8: quantize a dense checkpoint's linears to FP8 at load (LlamaLoadOptions).");
ABSL_FLAG(std::string, kv_cache_dtype, "bfloat16", "bfloat16 or fp8 (E4M3).");
// Ints, not bools: the documented spelling is "--timed 0", "--fusions 1".
ABSL_FLAG(int, timed, 1, "1: also capture graphs with timed GEMM algorithms.");
ABSL_FLAG(int, fusions, 0, "1: also capture graphs with the decode-step fusions on.");

namespace pagoda::worker {
namespace {

constexpr int kBlockSize = 16;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "bench_decode_step: %s\n", message.c_str());
  std::exit(1);
}

// The command line's values (their defaults are the ABSL_FLAGs').
struct Args {
  std::string model;
  std::vector<int> batches;
  int context;
  int iters;
  std::string quantization;  // LlamaLoadOptions::quantization
  DType kv_cache_dtype;
  bool timed;
  bool fusions;
};

Args ParseArgs(int argc, char** argv) {
  bench::ParseBenchCommandLine(argc, argv,
                               {"bench_decode_step",
                                "bench_decode_step --model DIR [--batches 1,64,256] [--context N] "
                                "[--iters N] [--quantization fp8] [--kv-cache-dtype fp8] "
                                "[--timed 0|1] [--fusions 0|1]"});
  const Args args{.model = absl::GetFlag(FLAGS_model),
                  .batches = absl::GetFlag(FLAGS_batches).values,
                  .context = absl::GetFlag(FLAGS_context),
                  .iters = absl::GetFlag(FLAGS_iters),
                  .quantization = absl::GetFlag(FLAGS_quantization),
                  .kv_cache_dtype =
                      absl::GetFlag(FLAGS_kv_cache_dtype) == "fp8" ? DType::kFp8E4M3 : DType::kBF16,
                  .timed = absl::GetFlag(FLAGS_timed) == 1,
                  .fusions = absl::GetFlag(FLAGS_fusions) == 1};
  bench::CheckFlags(
      "bench_decode_step",
      {bench::Required("model", args.model), flag_check::Range("context", args.context, 1, 1 << 20),
       flag_check::Range("iters", args.iters, 1, 10000),
       bench::OneOf("kv-cache-dtype", absl::GetFlag(FLAGS_kv_cache_dtype), {"bfloat16", "fp8"}),
       flag_check::Range("timed", absl::GetFlag(FLAGS_timed), 0, 1),
       flag_check::Range("fusions", absl::GetFlag(FLAGS_fusions), 0, 1)});
  return args;
}

// `batch` sequences of `context` tokens each, decoding their last token; each
// sequence owns its own run of blocks.
FlatBatch DecodeBatch(int batch, int context, int vocab) {
  const int blocks = (context + kBlockSize - 1) / kBlockSize;
  FlatBatch flat;
  flat.max_blocks_per_seq = blocks;
  flat.query_start.push_back(0);
  for (int s = 0; s < batch; ++s) {
    flat.input_ids.push_back((s * 7919) % vocab);
    flat.positions.push_back(context - 1);
    flat.slot_mapping.push_back((s * blocks) * kBlockSize + context - 1);
    flat.query_start.push_back(s + 1);
    flat.context_lens.push_back(context);
    for (int b = 0; b < blocks; ++b) flat.block_tables.push_back(s * blocks + b);
    flat.logits_indices.push_back(s);
    flat.sample_sequences.push_back(s);
    flat.temperatures.push_back(0.0f);
    flat.top_k.push_back(0);
    flat.top_p.push_back(1.0f);
    flat.seeds.push_back(0);
    flat.sample_indices.push_back(0);
    flat.num_logprobs.push_back(0);
  }
  return flat;
}

double CopyGbps(CudaBackend& backend) {
  const size_t bytes = size_t{1} << 30;
  auto src = backend.Allocate(DType::kBF16, bytes / 2);
  auto dst = backend.Allocate(DType::kBF16, bytes / 2);
  cudaMemset(src->raw(), 0x3c, bytes);
  std::vector<double> ms;
  for (int i = 0; i < 8; ++i) {
    backend.Synchronize();
    const auto start = std::chrono::steady_clock::now();
    cudaMemcpyAsync(dst->raw(), src->raw(), bytes, cudaMemcpyDeviceToDevice, backend.stream());
    backend.Synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
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

// Median graph-replay milliseconds of each batch of `args`, on graphs
// captured with (time_gemms) or without timed GEMM algorithms and with
// `fusions`; with eager_ms, the eager steps' too.
std::vector<double> GraphMs(const Args& args, LlamaModel& model, CudaBackend& backend,
                            CacheEngine& cache, bool time_gemms, std::vector<double>* eager_ms,
                            const CudaDecodeFusions& fusions = {}) {
  const int max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  const int blocks_per_seq = (args.context + kBlockSize - 1) / kBlockSize;
  backend.ForgetGemmAlgos();
  backend.set_decode_fusions(fusions);
  CudaGraphRunner graphs(&model, &backend, &cache, blocks_per_seq * kBlockSize);
  if (absl::Status status = graphs.Capture(max_batch, time_gemms); !status.ok()) {
    Die(status.ToString());
  }
  if (!backend.status().ok()) Die(backend.status().ToString());
  std::vector<double> graph_ms;
  SampleResults samples;
  for (int batch : args.batches) {
    const FlatBatch flat = DecodeBatch(batch, args.context, model.config().vocab_size);
    auto run = [&](bool use_graph) {
      absl::StatusOr<ForwardOutput> out =
          use_graph ? graphs.Run(flat) : model.Forward(flat, &cache);
      if (!out.ok()) Die(out.status().ToString());
      backend.Sample(out->logits, out->sampling, &samples);
    };
    if (!graphs.CanRun(flat)) Die("batch " + std::to_string(batch) + " cannot replay a graph");
    if (eager_ms != nullptr) eager_ms->push_back(MedianMs(args.iters, [&] { run(false); }));
    graph_ms.push_back(MedianMs(args.iters, [&] { run(true); }));
    if (!backend.status().ok()) Die(backend.status().ToString());
  }
  backend.set_decode_fusions({});
  return graph_ms;
}

int Main(int argc, char** argv) {
  const Args args = ParseArgs(argc, argv);
  auto created = CudaBackend::Create(0, DType::kBF16);
  if (!created.ok()) Die(created.status().ToString());
  std::unique_ptr<CudaBackend> backend = *std::move(created);
  const int max_batch = *std::max_element(args.batches.begin(), args.batches.end());
  auto communicator = CreateSingleRankCommunicator();
  auto loaded = LlamaModel::Load(args.model, backend.get(), communicator.get(),
                                 LlamaLoadOptions{.weight_dtype = DType::kBF16,
                                                  .max_num_batched_tokens = max_batch,
                                                  .max_num_seqs = max_batch,
                                                  .block_size = kBlockSize,
                                                  .quantization = args.quantization});
  if (!loaded.ok()) Die(loaded.status().ToString());
  std::unique_ptr<LlamaModel> model = *std::move(loaded);
  if (!backend->status().ok()) Die(backend->status().ToString());
  const double copy_gbps = CopyGbps(*backend);
  std::printf("%s: %.2f GB of weights (bf16%s), %s KV cache; d2d copy %.0f GB/s (read + write)\n",
              backend->DeviceDescription().c_str(), model->weight_bytes() / 1e9,
              args.quantization.empty() ? "" : (", quantization " + args.quantization).c_str(),
              DTypeName(args.kv_cache_dtype).data(), copy_gbps);

  const KvCacheShape shape = model->CacheShape(kBlockSize, args.kv_cache_dtype);
  const int blocks_per_seq = (args.context + kBlockSize - 1) / kBlockSize;
  CacheEngine cache(backend.get(), shape, max_batch * blocks_per_seq, 0);
  for (int layer = 0; layer < shape.num_layers; ++layer) {
    const size_t bytes = shape.bytes_per_layer_block() * max_batch * blocks_per_seq;
    cudaMemsetAsync(cache.layer(layer).key, 0x3c, bytes, backend->stream());
    cudaMemsetAsync(cache.layer(layer).value, 0x3b, bytes, backend->stream());
  }
  std::vector<double> eager_ms;
  const std::vector<double> graph_ms =
      GraphMs(args, *model, *backend, cache, /*time_gemms=*/false, &eager_ms);
  const std::vector<double> timed_ms =
      args.timed ? GraphMs(args, *model, *backend, cache, /*time_gemms=*/true, nullptr)
                 : std::vector<double>(args.batches.size(), std::nan(""));
  std::printf("GEMM problems with a timed algorithm: %zu\n", backend->num_timed_gemm_algos());
  const std::vector<double> fused_ms =
      args.fusions ? GraphMs(args, *model, *backend, cache, /*time_gemms=*/false, nullptr,
                             CudaDecodeFusions::All())
                   : std::vector<double>(args.batches.size(), std::nan(""));
  if (args.fusions) {
    std::printf("fused: GEMM problems where a no-split-K algorithm replaced a split-K pick: %zu\n",
                backend->num_no_split_k_gemm_algos());
  }
  std::printf("%6s %8s %10s %10s %10s %10s %10s %10s %10s %10s %11s\n", "batch", "context",
              "eager ms", "graph ms", "timed ms", "fused ms", "floor ms", "graph/flr", "fused/flr",
              "tok/s", "fused/graph");
  for (size_t i = 0; i < args.batches.size(); ++i) {
    const int batch = args.batches[i];
    const double kv_bytes =
        static_cast<double>(batch) * args.context * shape.bytes_per_block() / kBlockSize;
    const double floor_ms = (model->weight_bytes() + kv_bytes) / (copy_gbps * 1e9) * 1e3;
    std::printf("%6d %8d %10.3f %10.3f %10.3f %10.3f %10.3f %10.2f %10.2f %10.0f %11.3f\n", batch,
                args.context, eager_ms[i], graph_ms[i], timed_ms[i], fused_ms[i], floor_ms,
                graph_ms[i] / floor_ms, fused_ms[i] / floor_ms, batch / (graph_ms[i] * 1e-3),
                fused_ms[i] / graph_ms[i]);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda::worker

int main(int argc, char** argv) { return pagoda::worker::Main(argc, argv); }
