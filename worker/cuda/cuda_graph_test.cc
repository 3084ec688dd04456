// CUDA graphs vs eager (needs a GPU; skipped by exit code without one): a
// decode step replayed from a captured graph (padded to its bucket) must give
// the eager forward's greedy tokens and logits within bf16 noise, for batch
// sizes that fill a bucket and that need padding, and for a compressed-tensors
// FP8 W8A8 model with an FP8 KV cache (the CUDA FP8 linears and attention
// inside graphs) and a GPTQ int4 act-order model (the int GEMV and its input
// gather inside graphs); prefill steps and contexts past the captured length must
// not replay.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_graph_runner.h"
#include "worker/cuda/cuda_support.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {
namespace {

constexpr int kBlockSize = 16;
constexpr int kNumBlocks = 128;
constexpr int kMaxNumSeqs = 8;

// fp8: made by tests/reference/make_quantized_model.py as a compressed-tensors
// FP8 checkpoint (per-channel weights, per-token inputs) with KV scales;
// int4: as a GPTQ int4 act-order checkpoint (the int GEMV and its input
// gather inside the graph).
std::string MakeModel(bool fp8, bool int4) {
  const char* python = std::getenv("PAGODA_PYTHON3");
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       absl::StrCat("pagoda_graph_", fp8 ? "fp8_" : "", int4 ? "int4_" : "", getpid()))
          .string();
  const char* maker =
      fp8    ? " tests/reference/make_quantized_model.py --format ct-fp8 --kv-scales --out "
      : int4 ? " tests/reference/make_quantized_model.py --format gptq --desc-act "
               "--group-size 64 --out "
             : " scripts/make_tiny_model.py --out ";
  const std::string command = absl::StrCat(
      python != nullptr && *python != '\0' ? python : "python3", maker, dir,
      fp8 || int4 ? " --" : "",
      " --vocab-size 512 --hidden-size 256 --intermediate-size 512 --num-layers 3 --num-heads 4"
      " --num-kv-heads 2 --head-dim 64 --max-position-embeddings 256 --seed 7 > /dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

std::vector<float> Download(Backend& backend, const ForwardOutput& output) {
  std::vector<float> logits(output.logits.dim(0) * output.logits.dim(1));
  backend.DownloadBytes(output.logits.data, logits.data(), logits.size() * sizeof(float));
  return logits;
}

int Argmax(const float* row, int vocab) {
  int best = 0;
  for (int i = 1; i < vocab; ++i) best = row[i] > row[best] ? i : best;
  return best;
}

struct GraphCase {
  int num_seqs;
  bool fp8;           // FP8 W8A8 linears and an FP8 KV cache
  bool int4 = false;  // GPTQ int4 act-order linears
};

class CudaGraphTest : public ::testing::TestWithParam<GraphCase> {};

TEST_P(CudaGraphTest, ReplayGivesTheEagerTokens) {
  const int num_seqs = GetParam().num_seqs;
  const std::string dir = MakeModel(GetParam().fp8, GetParam().int4);
  auto created = CudaBackend::Create(0, DType::kBF16);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<CudaBackend> backend = *std::move(created);
  auto communicator = CreateSingleRankCommunicator();
  auto model = LlamaModel::Load(dir, backend.get(), communicator.get(),
                                LlamaLoadOptions{.weight_dtype = DType::kBF16,
                                                 .max_num_batched_tokens = 512,
                                                 .max_num_seqs = kMaxNumSeqs,
                                                 .block_size = kBlockSize});
  ASSERT_TRUE(model.ok()) << model.status();
  CacheEngine cache(
      backend.get(),
      (*model)->CacheShape(kBlockSize, GetParam().fp8 ? DType::kFp8E4M3 : DType::kBF16), kNumBlocks,
      0);
  CudaGraphRunner graphs(model->get(), backend.get(), &cache, CudaMaxModelLen((*model)->config()));
  ASSERT_TRUE(graphs.Capture(kMaxNumSeqs).ok()) << backend->status();
  EXPECT_EQ(graphs.num_graphs(), 4);  // 1, 2, 4, 8
  const int vocab = (*model)->config().vocab_size;
  const BatchLimits limits{.vocab_size = vocab,
                           .block_size = kBlockSize,
                           .num_gpu_blocks = kNumBlocks,
                           .num_cpu_blocks = 0};

  v1::StepPlan plan;
  std::vector<int> lengths;
  for (int s = 0; s < num_seqs; ++s) {
    auto* step = plan.add_sequences();
    step->set_seq_id(s);
    lengths.push_back(3 + 7 * s);
    for (int t = 0; t < lengths.back(); ++t) step->add_token_ids((t * 13 + s) % vocab);
    for (int b = 0; b < 8; ++b) step->add_block_table(s * 8 + b);
    step->set_do_sample(true);
  }
  auto prefill = FlattenStepPlan(plan, limits);
  ASSERT_TRUE(prefill.ok());
  EXPECT_FALSE(graphs.CanRun(*prefill));
  auto first = (*model)->Forward(*prefill, &cache);
  ASSERT_TRUE(first.ok());
  std::vector<float> logits = Download(*backend, *first);
  int mismatches = 0;
  for (int step = 0; step < 16; ++step) {
    v1::StepPlan next = plan;
    for (int s = 0; s < num_seqs; ++s) {
      auto* seq = next.mutable_sequences(s);
      seq->clear_token_ids();
      seq->add_token_ids(Argmax(logits.data() + s * vocab, vocab));
      seq->set_start_position(lengths[s]++);
    }
    plan = next;
    auto batch = FlattenStepPlan(plan, limits);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(graphs.CanRun(*batch));
    auto replayed = graphs.Run(*batch);
    ASSERT_TRUE(replayed.ok()) << replayed.status();
    ASSERT_EQ(replayed->logits.dim(0), num_seqs);
    const std::vector<float> from_graph = Download(*backend, *replayed);
    auto eager = (*model)->Forward(*batch, &cache);
    ASSERT_TRUE(eager.ok());
    logits = Download(*backend, *eager);
    ASSERT_TRUE(backend->status().ok()) << backend->status();
    double diff = 0, norm = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      diff += (from_graph[i] - logits[i]) * (from_graph[i] - logits[i]);
      norm += logits[i] * logits[i];
    }
    EXPECT_LE(std::sqrt(diff / norm), 1e-2) << "step " << step;
    for (int s = 0; s < num_seqs; ++s) {
      mismatches +=
          Argmax(from_graph.data() + s * vocab, vocab) != Argmax(logits.data() + s * vocab, vocab);
    }
  }
  EXPECT_EQ(mismatches, 0);
  // A context past the captured length does not replay.
  auto long_plan = plan;
  long_plan.mutable_sequences(0)->set_start_position(300);
  for (int b = 0; b < 12; ++b) long_plan.mutable_sequences(0)->add_block_table(64 + b);
  auto long_batch = FlattenStepPlan(long_plan, limits);
  ASSERT_TRUE(long_batch.ok());
  EXPECT_FALSE(graphs.CanRun(*long_batch));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(BatchSizes, CudaGraphTest,
                         ::testing::Values(GraphCase{1, false}, GraphCase{3, false},
                                           GraphCase{8, false}, GraphCase{3, true},
                                           GraphCase{8, true}, GraphCase{3, false, true},
                                           GraphCase{8, false, true}),
                         [](const ::testing::TestParamInfo<GraphCase>& info) {
                           return absl::StrCat(info.param.fp8 ? "fp8_" : "",
                                               info.param.int4 ? "int4_" : "", "batch",
                                               info.param.num_seqs);
                         });

}  // namespace
}  // namespace pagoda::worker
