// CUDA graphs vs eager (needs a GPU; skipped by exit code without one): a
// decode step replayed from a captured graph (padded to its bucket) must give
// the eager forward's greedy tokens and logits within bf16 noise, for batch
// sizes that fill a bucket and that need padding, and for a compressed-tensors
// FP8 W8A8 model with an FP8 KV cache (the CUDA FP8 linears and attention
// inside graphs) and a GPTQ int4 act-order model (the int GEMV and its input
// gather inside graphs); prefill steps and contexts past the captured length
// must not replay. Speculative decoding (issue 46): with
// num_speculative_tokens reserved at load, an eager verify step (k + 1 rows a
// sequence) leaves the graphs on (without it, it moves the workspace and they
// stop); an EAGLE head's features (final_hidden, an EAGLE-3 target's aux
// rows) come out of a replay equal to the eager forward's.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
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

// Per sequence of `num_seqs` from token `start`: `query` tokens at
// positions start.., a prompt chunk, or (`verify`) an input token and
// query - 1 drafts, every row a logits row.
v1::StepPlan SpeculativePlan(int num_seqs, int query, int start, int vocab, bool verify) {
  v1::StepPlan plan;
  for (int s = 0; s < num_seqs; ++s) {
    auto* step = plan.add_sequences();
    step->set_seq_id(s);
    step->set_start_position(start);
    for (int t = 0; t < query; ++t) {
      const int token = (t * 7 + s * 3 + start) % vocab;
      if (t == 0 || !verify) {
        step->add_token_ids(token);
      } else {
        step->add_draft_token_ids(token);
      }
    }
    for (int b = 0; b < 8; ++b) step->add_block_table(s * 8 + b);
    step->set_do_sample(true);
  }
  return plan;
}

std::vector<char> DownloadRows(Backend& backend, const void* rows, size_t bytes) {
  std::vector<char> host(bytes);
  backend.DownloadBytes(rows, host.data(), bytes);
  return host;
}

// Relative L2 distance of two bf16 row sets.
double Bf16Distance(const std::vector<char>& a, const std::vector<char>& b) {
  auto value = [](const std::vector<char>& v, size_t i) {
    uint16_t bits;
    std::memcpy(&bits, v.data() + 2 * i, 2);
    const uint32_t wide = uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &wide, 4);
    return static_cast<double>(f);
  };
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() / 2; ++i) {
    diff += (value(a, i) - value(b, i)) * (value(a, i) - value(b, i));
    norm += value(b, i) * value(b, i);
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

class CudaSpeculativeGraphTest : public ::testing::TestWithParam<int> {};

// GetParam(): the k the model was loaded for (0: none reserved).
TEST_P(CudaSpeculativeGraphTest, VerifyStepsKeepTheGraphsOnAndFeaturesReplay) {
  const int reserved_k = GetParam();
  constexpr int kDrafts = 4;
  const std::string dir = MakeModel(false, false);
  auto created = CudaBackend::Create(0, DType::kBF16);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<CudaBackend> backend = *std::move(created);
  auto communicator = CreateSingleRankCommunicator();
  auto model = LlamaModel::Load(dir, backend.get(), communicator.get(),
                                LlamaLoadOptions{.weight_dtype = DType::kBF16,
                                                 .max_num_batched_tokens = 512,
                                                 .max_num_seqs = kMaxNumSeqs,
                                                 .num_speculative_tokens = reserved_k,
                                                 .block_size = kBlockSize});
  ASSERT_TRUE(model.ok()) << model.status();
  // An EAGLE and an EAGLE-3 head's features, as DraftModel::LoadEagle asks.
  (*model)->KeepFinalHidden();
  (*model)->KeepAuxHidden({0, 2});
  CacheEngine cache(backend.get(), (*model)->CacheShape(kBlockSize, DType::kBF16), kNumBlocks, 0);
  CudaGraphRunner graphs(model->get(), backend.get(), &cache, CudaMaxModelLen((*model)->config()));
  // As the CUDA runner does when k is reserved.
  if (reserved_k > 0) graphs.EnableVerifyGraphs(reserved_k + 1, 512);
  ASSERT_TRUE(graphs.Capture(kMaxNumSeqs).ok()) << backend->status();
  EXPECT_EQ(graphs.num_verify_graphs(), reserved_k > 0 ? 4 : 0);  // 1, 2, 4, 8
  const int vocab = (*model)->config().vocab_size;
  const BatchLimits limits{.vocab_size = vocab,
                           .block_size = kBlockSize,
                           .num_gpu_blocks = kNumBlocks,
                           .num_cpu_blocks = 0};
  // A prefill, then the largest verify step, eagerly: kMaxNumSeqs x (k + 1)
  // rows (with k reserved it could replay a verify graph).
  for (const auto& [query, start] : {std::pair{20, 0}, std::pair{kDrafts + 1, 20}}) {
    const bool verify = query == kDrafts + 1;
    auto batch = FlattenStepPlan(SpeculativePlan(kMaxNumSeqs, query, start, vocab, verify), limits);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->num_logits_rows(), verify ? kMaxNumSeqs * query : kMaxNumSeqs);
    EXPECT_EQ(graphs.CanRun(*batch), reserved_k > 0 && verify);
    ASSERT_TRUE((*model)->Forward(*batch, &cache).ok());
  }
  ASSERT_TRUE(backend->status().ok()) << backend->status();
  auto decode = FlattenStepPlan(SpeculativePlan(3, 1, 20 + kDrafts + 1, vocab, false), limits);
  ASSERT_TRUE(decode.ok());
  if (reserved_k < kDrafts) {
    EXPECT_FALSE(graphs.buffers_unmoved());
    EXPECT_FALSE(graphs.CanRun(*decode));
    std::filesystem::remove_all(dir);
    return;
  }
  EXPECT_TRUE(graphs.buffers_unmoved());
  ASSERT_TRUE(graphs.CanRun(*decode));
  const size_t hidden_bytes = 3 * (*model)->hidden_row_bytes();
  auto replayed = graphs.Run(*decode);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(graphs.num_replays(), 1);
  // Read after the replay (on the stream, after the graph): its writes.
  const std::vector<float> replay_logits = Download(*backend, *replayed);
  const auto replay_final = DownloadRows(*backend, replayed->final_hidden, hidden_bytes);
  const auto replay_aux = DownloadRows(*backend, replayed->aux_hidden, 2 * hidden_bytes);
  auto eager = (*model)->Forward(*decode, &cache);
  ASSERT_TRUE(eager.ok());
  const std::vector<float> eager_logits = Download(*backend, *eager);
  EXPECT_LE(Bf16Distance(replay_final, DownloadRows(*backend, eager->final_hidden, hidden_bytes)),
            1e-2);
  EXPECT_LE(Bf16Distance(replay_aux, DownloadRows(*backend, eager->aux_hidden, 2 * hidden_bytes)),
            1e-2);
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(Argmax(replay_logits.data() + s * vocab, vocab),
              Argmax(eager_logits.data() + s * vocab, vocab))
        << "sequence " << s;
  }
  ASSERT_TRUE(backend->status().ok()) << backend->status();
  EXPECT_TRUE(graphs.buffers_unmoved());
  // A verify step replayed from the 4-sequence verify graph: 3 sequences
  // with 5, 2 and 1 rows (fewer than the captured 5 each, a padding
  // sequence) give the eager forward's logits on every row (positions 26..:
  // after the decode's, so every key it reads was written).
  v1::StepPlan verify_plan = SpeculativePlan(3, kDrafts + 1, 20 + kDrafts + 2, vocab, true);
  verify_plan.mutable_sequences(1)->mutable_draft_token_ids()->Truncate(1);
  verify_plan.mutable_sequences(2)->clear_draft_token_ids();
  auto verify = FlattenStepPlan(verify_plan, limits);
  ASSERT_TRUE(verify.ok()) << verify.status();
  ASSERT_TRUE(graphs.CanRun(*verify));
  auto verify_replayed = graphs.Run(*verify);
  ASSERT_TRUE(verify_replayed.ok()) << verify_replayed.status();
  EXPECT_EQ(graphs.num_verify_replays(), 1);
  ASSERT_EQ(verify_replayed->logits.dim(0), verify->num_logits_rows());
  const std::vector<float> verify_from_graph = Download(*backend, *verify_replayed);
  auto verify_eager = (*model)->Forward(*verify, &cache);
  ASSERT_TRUE(verify_eager.ok());
  const std::vector<float> verify_logits = Download(*backend, *verify_eager);
  ASSERT_EQ(verify_from_graph.size(), verify_logits.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < verify_logits.size(); ++i) {
    diff += (verify_from_graph[i] - verify_logits[i]) * (verify_from_graph[i] - verify_logits[i]);
    norm += verify_logits[i] * verify_logits[i];
  }
  EXPECT_LE(std::sqrt(diff / norm), 1e-2);
  for (int r = 0; r < verify->num_logits_rows(); ++r) {
    EXPECT_EQ(Argmax(verify_from_graph.data() + r * vocab, vocab),
              Argmax(verify_logits.data() + r * vocab, vocab))
        << "logits row " << r;
  }
  ASSERT_TRUE(backend->status().ok()) << backend->status();
  EXPECT_TRUE(graphs.buffers_unmoved());
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(ReservedK, CudaSpeculativeGraphTest, ::testing::Values(0, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("k", info.param);
                         });

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
