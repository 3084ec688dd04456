// LoRA on the CUDA backend (needs a GPU; skipped by exit code without one),
// the batch of tests/worker/lora_worker_test.cc: three random PEFT adapters
// (tests/reference/lora_reference.py: ranks 8, 4 with rsLoRA and 13; bf16,
// f32 and f16; different targets) in slots 1..3 of the model on the device
// (CudaLoraSlots, the batched shrink/expand kernels), five sequences (the
// base model, each adapter, one adapter twice) prefilled in one step and
// decoded together for six steps. The reference is the CPU model in f32
// with the same adapters, which lora_worker_test and lora_reference_test
// hold to the float64 merged weights (W + scale·B·A): each step's bf16
// logits must be within 1e-2 relative L2, greedy tokens must agree on the
// decisive rows, and every adapter row must differ from the base model's
// logits by far more than that tolerance (so a device that skipped the
// adapters fails).

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/lora_test_adapters.h"
#include "tests/support/tiny_model.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_lora_slots.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {
namespace {

namespace fs = std::filesystem;

constexpr int kBlockSize = 16;
constexpr int kBlocksPerSeq = 2;
constexpr int kNumBlocks = 16;
constexpr int kDecodeSteps = 6;
constexpr int kMaxLoraRank = 16;
constexpr double kTolerance = 1e-2;

using AdapterSpec = ::pagoda::testing::TestAdapterSpec;
// The CUDA slots apply the seven projections (embed_tokens and lm_head
// updates run on the CPU worker only, docs/lora.md).
const std::vector<AdapterSpec>& Adapters() {
  return ::pagoda::testing::TestAdaptersOfProjections();
}

struct Request {
  std::vector<int> prompt;
  int slot;
};

const std::vector<Request>& Requests() {
  static const std::vector<Request> requests = {
      {{3, 14, 15, 9, 2}, 0}, {{6, 5, 35, 8}, 1},      {{9, 7, 9, 3, 2, 38, 4}, 2},
      {{26, 4, 33}, 3},       {{8, 3, 2, 7, 9, 5}, 1},
  };
  return requests;
}

// Backend, model (with or without adapter slots) and cache.
struct Side {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> communicator = CreateSingleRankCommunicator();
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<CacheEngine> cache;

  // Logits of `plan` as host floats [rows, vocab].
  std::vector<float> Forward(const v1::StepPlan& plan) {
    const BatchLimits limits{.vocab_size = model->config().vocab_size,
                             .block_size = kBlockSize,
                             .num_gpu_blocks = kNumBlocks,
                             .num_cpu_blocks = 0,
                             .lora_slots = model->PinLoraSlots()};
    auto batch = FlattenStepPlan(plan, limits);
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) return {};
    auto output = model->Forward(*batch, cache.get());
    EXPECT_TRUE(output.ok()) << output.status();
    if (!output.ok()) return {};
    std::vector<float> logits(output->logits.num_elements());
    backend->DownloadBytes(output->logits.data, logits.data(), logits.size() * sizeof(float));
    return logits;
  }
};

Side Load(const std::string& dir, std::unique_ptr<Backend> backend, DType dtype, int max_loras,
          CudaBackend* device) {
  Side side;
  side.backend = std::move(backend);
  LlamaLoadOptions options{.weight_dtype = dtype,
                           .max_num_batched_tokens = 64,
                           .max_num_seqs = 8,
                           .block_size = kBlockSize,
                           .max_loras = max_loras,
                           .max_lora_rank = kMaxLoraRank};
  if (device != nullptr) {
    options.lora_device = [device](
                              const LoraSlots& slots,
                              int max_tokens) -> absl::StatusOr<std::shared_ptr<LoraDeviceSlots>> {
      auto made = CudaLoraSlots::Create(device, slots, max_tokens);
      if (!made.ok()) return made.status();
      return std::shared_ptr<LoraDeviceSlots>(*std::move(made));
    };
  }
  auto model = LlamaModel::Load(dir, side.backend.get(), side.communicator.get(), options);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return side;
  side.model = *std::move(model);
  side.cache = std::make_unique<CacheEngine>(
      side.backend.get(),
      side.model->CacheShape(kBlockSize, side.backend->default_kv_cache_dtype()), kNumBlocks, 0);
  return side;
}

double RelativeL2(const float* got, const float* want, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

int Argmax(const float* row, int vocab) {
  return static_cast<int>(std::max_element(row, row + vocab) - row);
}

// As cuda_model_test: the best logit leads by more than bf16 can blur.
bool IsDecisive(const float* row, int vocab) {
  const int best = Argmax(row, vocab);
  double squares = 0;
  float runner_up = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    squares += static_cast<double>(row[i]) * row[i];
    if (i != best) runner_up = std::max(runner_up, row[i]);
  }
  return row[best] - runner_up > 0.05 * std::sqrt(squares / vocab);
}

// Every request's sequence: its new tokens from `start`, in its slot (or
// slot 0 for all when `base`).
v1::StepPlan Plan(const std::vector<std::vector<int>>& inputs, const std::vector<int>& starts,
                  bool base) {
  v1::StepPlan plan;
  for (size_t s = 0; s < inputs.size(); ++s) {
    v1::SequenceStep* step = plan.add_sequences();
    step->set_seq_id(static_cast<int>(s) + 1);
    for (int token : inputs[s]) step->add_token_ids(token);
    step->set_start_position(starts[s]);
    for (int b = 0; b < kBlocksPerSeq; ++b) {
      step->add_block_table(static_cast<int>(s) * kBlocksPerSeq + b);
    }
    step->set_do_sample(true);
    step->set_lora_slot(base ? 0 : Requests()[s].slot);
  }
  return plan;
}

TEST(CudaLoraTest, MixedAdapterBatchFollowsTheCpuModelWithTheSameAdapters) {
  const std::string dir = ::pagoda::testing::TempPath("cuda_lora_test");
  fs::create_directories(dir);
  const std::string base = dir + "/base";
  ASSERT_TRUE(::pagoda::testing::WriteTinyModel(
                  base,
                  "--vocab-size 512 --hidden-size 256 --intermediate-size 352 --num-layers 2 "
                  "--num-heads 4 --num-kv-heads 2 --head-dim 64 --dtype f32 --seed 7")
                  .ok());
  for (const AdapterSpec& spec : Adapters()) {
    const absl::Status written =
        ::pagoda::testing::WriteTestAdapter(base, dir + "/" + spec.name, spec);
    ASSERT_TRUE(written.ok()) << written;
  }
  Side cpu = Load(base, CreateCpuBackend(1), DType::kF32, 3, nullptr);
  Side cpu_base = Load(base, CreateCpuBackend(1), DType::kF32, 0, nullptr);
  auto cuda_backend = CudaBackend::Create(0, DType::kBF16);
  ASSERT_TRUE(cuda_backend.ok()) << cuda_backend.status();
  CudaBackend* cuda_raw = cuda_backend->get();
  Side gpu = Load(base, *std::move(cuda_backend), DType::kBF16, 3, cuda_raw);
  ASSERT_NE(cpu.model, nullptr);
  ASSERT_NE(cpu_base.model, nullptr);
  ASSERT_NE(gpu.model, nullptr);
  for (int slot = 1; slot <= 3; ++slot) {
    const std::string path = dir + "/" + Adapters()[slot - 1].name;
    for (Side* side : {&cpu, &gpu}) {
      auto loaded = side->model->lora_loader()->Load(slot, path);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(loaded->rank, Adapters()[slot - 1].rank);
    }
  }
  ASSERT_TRUE(cuda_raw->status().ok()) << cuda_raw->status();

  const int vocab = cpu.model->config().vocab_size;
  std::vector<std::vector<int>> inputs;
  std::vector<int> starts(Requests().size(), 0);
  for (const Request& request : Requests()) inputs.push_back(request.prompt);
  int rows = 0, decisive_rows = 0, decisive_agree = 0;
  double worst = 0, least_adapter_effect = std::numeric_limits<double>::infinity();
  for (int step = 0; step <= kDecodeSteps; ++step) {
    const std::vector<float> want = cpu.Forward(Plan(inputs, starts, false));
    const std::vector<float> got = gpu.Forward(Plan(inputs, starts, false));
    const std::vector<float> plain = cpu_base.Forward(Plan(inputs, starts, true));
    ASSERT_TRUE(cuda_raw->status().ok()) << cuda_raw->status();
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(plain.size(), want.size());
    const double error = RelativeL2(got.data(), want.data(), want.size());
    worst = std::max(worst, error);
    EXPECT_LE(error, kTolerance) << "step " << step;
    for (size_t s = 0; s < inputs.size(); ++s) {
      const float* cpu_row = want.data() + s * vocab;
      if (Requests()[s].slot > 0) {  // The adapter moves this row's logits.
        const double effect = RelativeL2(plain.data() + s * vocab, cpu_row, vocab);
        least_adapter_effect = std::min(least_adapter_effect, effect);
        EXPECT_GT(effect, 5 * kTolerance) << "step " << step << " sequence " << s;
      }
      const int token = Argmax(cpu_row, vocab);
      ++rows;
      if (IsDecisive(cpu_row, vocab)) {
        ++decisive_rows;
        decisive_agree += token == Argmax(got.data() + s * vocab, vocab);
      }
      starts[s] += static_cast<int>(inputs[s].size());
      inputs[s] = {token};
    }
  }
  EXPECT_GE(decisive_rows, rows / 2) << "too few decisive rows to judge greedy agreement";
  EXPECT_GE(decisive_agree, 0.99 * decisive_rows)
      << decisive_agree << " of " << decisive_rows << " decisive greedy tokens agree";
  std::printf(
      "CUDA LoRA: worst relative L2 %.2e, least adapter effect %.2e, decisive greedy "
      "agreement %d/%d\n",
      worst, least_adapter_effect, decisive_agree, decisive_rows);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::worker
