// The CUDA model over NCCL (needs a GPU; skipped by exit code without one),
// on a tiny random model (4 heads, 2 KV heads, head 64) in bf16:
// - one GPU: the model's all-reduces through a size-1 NCCL communicator on
//   the backend's stream give the logits of the single-rank communicator
//   (a one-rank sum changes nothing), the collective time is counted, and
//   after Abort (ncclCommAbort) the forward fails with ABORTED;
// - two GPUs or more: two ranks, each on its own GPU with its weight slices,
//   give on rank 0 the logits of one rank within bf16 noise (the partial sums
//   are added in another order) and the same greedy tokens; rank 1 computes
//   no logits of its own: its half of the vocabulary-parallel lm_head's
//   rows reaches rank 0 through an NCCL all-gather (the path the CUDA
//   runner turns on once this passes).

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/cache_engine.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/communicator.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {
namespace {

constexpr int kBlockSize = 16;
constexpr int kNumBlocks = 32;
constexpr int kDecodeSteps = 8;
constexpr int kVocab = 512;

std::string MakeModel() {
  const char* python = std::getenv("PAGODA_PYTHON3");
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("pagoda_cuda_tp_", getpid())).string();
  const std::string command =
      absl::StrCat(python != nullptr && *python != '\0' ? python : "python3",
                   " scripts/make_tiny_model.py --out ", dir, " --vocab-size ", kVocab,
                   " --hidden-size 256 --intermediate-size 512 --num-layers 2 --num-heads 4"
                   " --num-kv-heads 2 --head-dim 64 --seed 7 > /dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

// One rank: its backend on its GPU, its communicator, its model slices.
struct Rank {
  std::unique_ptr<CudaBackend> backend;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<TimedCommunicator> timed;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<CacheEngine> cache;

  // Rank 0's logits of `batch` as host floats (empty on other ranks).
  absl::StatusOr<std::vector<float>> Forward(const FlatBatch& batch) {
    backend->MakeCurrent();
    auto output = model->Forward(batch, cache.get());
    if (!output.ok()) return output.status();
    std::vector<float> logits(output->logits.num_elements());
    if (!logits.empty()) {
      backend->DownloadBytes(output->logits.data, logits.data(), logits.size() * sizeof(float));
    }
    if (!backend->status().ok()) return backend->status();
    return logits;
  }
};

// Makes rank `rank` of `world` on GPU `rank`: over NCCL when `unique_id` is
// given (collectives on the backend's stream), else single-rank.
absl::Status MakeRank(const std::string& dir, int rank, int world, const std::string& unique_id,
                      Rank* out) {
  auto backend = CudaBackend::Create(rank, DType::kBF16);
  if (!backend.ok()) return backend.status();
  out->backend = *std::move(backend);
  if (unique_id.empty()) {
    out->communicator = CreateSingleRankCommunicator();
  } else {
    auto communicator = comm::CreateNcclCommunicator(
        comm::NcclOptions{.rank = rank,
                          .world_size = world,
                          .device = rank,
                          .unique_id = unique_id,
                          .stream = out->backend->stream(),
                          .timeout = std::chrono::milliseconds(60000),
                          .group_secret = "0123456789abcdef0123456789abcdef"});
    if (!communicator.ok()) return communicator.status();
    out->communicator = *std::move(communicator);
  }
  out->timed = std::make_unique<TimedCommunicator>(out->communicator.get());
  auto model = LlamaModel::Load(dir, out->backend.get(), out->timed.get(),
                                LlamaLoadOptions{.weight_dtype = DType::kBF16,
                                                 .max_num_batched_tokens = 256,
                                                 .max_num_seqs = 8,
                                                 .block_size = kBlockSize});
  if (!model.ok()) return model.status();
  out->model = *std::move(model);
  out->cache = std::make_unique<CacheEngine>(
      out->backend.get(),
      out->model->CacheShape(kBlockSize, out->backend->default_kv_cache_dtype()), kNumBlocks, 0);
  return out->backend->status();
}

// Makes every rank of a group at once (NCCL's init needs them all).
std::vector<Rank> MakeGroup(const std::string& dir, int world) {
  auto id = comm::CreateNcclUniqueId();
  EXPECT_TRUE(id.ok()) << id.status();
  std::vector<Rank> ranks(world);
  std::vector<absl::Status> made(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { made[r] = MakeRank(dir, r, world, id.value_or(""), &ranks[r]); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_TRUE(made[r].ok()) << "rank " << r << ": " << made[r];
  return ranks;
}

// Every rank's forward of `batch` at once; rank 0's logits.
absl::StatusOr<std::vector<float>> GroupForward(std::vector<Rank>& ranks, const FlatBatch& batch) {
  std::vector<absl::StatusOr<std::vector<float>>> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r) {
    threads.emplace_back([&, r] { out[r] = ranks[r].Forward(batch); });
  }
  for (std::thread& t : threads) t.join();
  for (size_t r = 1; r < ranks.size(); ++r) {
    if (!out[r].ok()) return out[r].status();
    if (!out[r]->empty()) return absl::InternalError(absl::StrCat("rank ", r, " made logits"));
  }
  return out[0];
}

double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

int Argmax(const float* row) {
  int best = 0;
  for (int i = 1; i < kVocab; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

// Prefill of prompts of 5, 21 and 40 tokens, then kDecodeSteps greedy decode
// steps on `reference`'s tokens: calls check(step, reference logits, group
// rank 0 logits) each step.
template <typename Check>
void RunSteps(Rank& reference, std::vector<Rank>& group, Check check) {
  const std::vector<int> prompt_lens = {5, 21, 40};
  std::vector<int> length(prompt_lens.size());
  v1::StepPlan plan;
  for (size_t s = 0; s < prompt_lens.size(); ++s) {
    auto* step = plan.add_sequences();
    step->set_seq_id(s);
    for (int t = 0; t < prompt_lens[s]; ++t) step->add_token_ids((t * 37 + s * 11 + 3) % kVocab);
    for (int b = 0; b < 4; ++b) step->add_block_table(static_cast<int>(s) * 4 + b);
    step->set_do_sample(true);
    length[s] = prompt_lens[s];
  }
  const BatchLimits limits{.vocab_size = kVocab,
                           .block_size = kBlockSize,
                           .num_gpu_blocks = kNumBlocks,
                           .num_cpu_blocks = 0};
  for (int step = 0; step <= kDecodeSteps; ++step) {
    auto batch = FlattenStepPlan(plan, limits);
    ASSERT_TRUE(batch.ok()) << batch.status();
    auto want = reference.Forward(*batch);
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = GroupForward(group, *batch);
    ASSERT_TRUE(got.ok()) << "step " << step << ": " << got.status();
    ASSERT_EQ(got->size(), want->size());
    check(step, *want, *got);
    v1::StepPlan next;
    for (size_t s = 0; s < prompt_lens.size(); ++s) {
      auto* seq = next.add_sequences();
      *seq = plan.sequences(s);
      seq->clear_token_ids();
      seq->add_token_ids(Argmax(want->data() + s * kVocab));
      seq->set_start_position(length[s]++);
    }
    plan = next;
  }
}

TEST(CudaTensorParallelTest, SizeOneNcclAllReduceOnTheBackendStreamChangesNothing) {
  const std::string dir = MakeModel();
  Rank single;
  ASSERT_TRUE(MakeRank(dir, 0, 1, "", &single).ok());
  std::vector<Rank> group = MakeGroup(dir, 1);
  ASSERT_NE(group[0].model, nullptr);
  RunSteps(single, group,
           [](int step, const std::vector<float>& want, const std::vector<float>& got) {
             EXPECT_LE(RelativeL2(got, want), 1e-6) << "step " << step;
           });
  EXPECT_GT(group[0].timed->TakeSeconds(), 0.0);  // The all-reduces went through NCCL.

  group[0].communicator->Abort();  // ncclCommAbort: the next forward fails.
  auto batch = FlattenStepPlan(
      [] {
        v1::StepPlan plan;
        auto* seq = plan.add_sequences();
        seq->add_token_ids(3);
        seq->add_block_table(0);
        seq->set_do_sample(true);
        return plan;
      }(),
      BatchLimits{.vocab_size = kVocab,
                  .block_size = kBlockSize,
                  .num_gpu_blocks = kNumBlocks,
                  .num_cpu_blocks = 0});
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(group[0].Forward(*batch).status().code(), absl::StatusCode::kAborted);
  std::filesystem::remove_all(dir);
}

TEST(CudaTensorParallelTest, TwoRanksOnTwoGpusFollowOneRank) {
  if (DeviceCount() < 2) GTEST_SKIP() << "needs two GPUs, this machine has " << DeviceCount();
  const std::string dir = MakeModel();
  Rank single;
  ASSERT_TRUE(MakeRank(dir, 0, 1, "", &single).ok());
  std::vector<Rank> group = MakeGroup(dir, 2);
  ASSERT_NE(group[0].model, nullptr);
  ASSERT_NE(group[1].model, nullptr);
  // Each rank holds half the KV heads: half the single rank's block bytes.
  EXPECT_EQ(2 * group[1].model->CacheShape(kBlockSize, DType::kBF16).bytes_per_block(),
            single.model->CacheShape(kBlockSize, DType::kBF16).bytes_per_block());
  int rows = 0, agree = 0;
  RunSteps(single, group,
           [&](int step, const std::vector<float>& want, const std::vector<float>& got) {
             EXPECT_LE(RelativeL2(got, want), 1e-2) << "step " << step;
             for (size_t row = 0; row < want.size() / kVocab; ++row, ++rows) {
               agree += Argmax(got.data() + row * kVocab) == Argmax(want.data() + row * kVocab);
             }
           });
  EXPECT_GE(agree, 0.99 * rows) << agree << " of " << rows << " greedy tokens agree";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::worker
