// GPU-vs-CPU logits on random-weight models (needs a GPU; skipped by exit
// code without one): the CUDA backend in bf16 against the CPU backend in
// f32, over a prefill of three sequences and 16 decode steps fed the CPU's
// greedy tokens (so both see the same inputs). Each step's logits must be
// within 1e-2 relative (L2 over the step) and the greedy tokens must agree on
// at least 99 % of the decisive rows (3e-2 and 90 % for FP8, below). Cases: head 64 and 128, GQA
// and MHA, Qwen2 q/k/v bias with tied embeddings, llama3 rope scaling, a bf16 checkpoint, an FP8
// E4M3 KV cache on both sides (--kv-cache-dtype fp8) with the checkpoint's per-layer
// k_scale/v_scale, and compressed-tensors FP8 W8A8 checkpoints (per-channel weights with per-token
// inputs, per-tensor with a static input scale) through the CPU's and the GPU's FP8 linears, and
// weight-only int4/int8 checkpoints (AWQ, GPTQ act-order, compressed-tensors pack-quantized)
// and a compressed-tensors int8 W8A8 one through the CPU's int linears and the GPU's
// CudaIntLinear (its GEMV on decode steps, the dequantized weight and GEMM on the prefill). The
// forward allocates no device memory after the first step.

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
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/quant_linear.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {
namespace {

constexpr int kBlockSize = 16;
constexpr int kNumBlocks = 64;
constexpr int kDecodeSteps = 16;

struct ModelCase {
  std::string name;
  std::string args;  // make_tiny_model.py flags beyond --out.
  // Both sides cache K/V as FP8 E4M3, the model carrying random per-layer
  // k_scale/v_scale (made with --kv-scales).
  bool fp8_kv_cache = false;
  // Non-empty: the model is tests/reference/make_quantized_model.py
  // --format <this> <quantizer_flags> over the same make_tiny_model.py flags.
  std::string quantized_format = "";
  std::string quantizer_flags = "";
  // The logits' bound, and the share of decisive greedy tokens that must
  // agree (kFp8* for the FP8 cases).
  double max_relative_l2 = 1e-2;
  double min_greedy_agreement = 0.99;
};

// FP8 (KV cache or inputs): the GPU quantizes bf16 values, the CPU f32 ones,
// so a value within bf16's rounding of an E4M3 midpoint (a few percent of
// them: E4M3 steps are 2^-3 relative, bf16's rounding 2^-9) takes the
// neighbouring code on one side, a step of 6-12 % of that element. Bounds
// set by that estimate, not yet by a GPU run: the first one calibrates.
constexpr double kFp8MaxRelativeL2 = 3e-2;
constexpr double kFp8MinGreedyAgreement = 0.9;

std::string Python() {
  const char* python = std::getenv("PAGODA_PYTHON3");
  return python != nullptr && *python != '\0' ? python : "python3";
}

std::string MakeModel(const ModelCase& model) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           absl::StrCat("pagoda_cuda_", model.name, "_", getpid()))
                              .string();
  const bool quantizer = model.fp8_kv_cache || !model.quantized_format.empty();
  const std::string command =
      quantizer ? absl::StrCat(Python(), " tests/reference/make_quantized_model.py --out ", dir,
                               " --format ",
                               model.quantized_format.empty() ? "dense" : model.quantized_format,
                               " ", model.quantizer_flags, model.fp8_kv_cache ? " --kv-scales" : "",
                               " -- ", model.args, " > /dev/null")
                : absl::StrCat(Python(), " scripts/make_tiny_model.py --out ", dir, " ", model.args,
                               " > /dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

// One side (CPU or CUDA): backend, model and cache.
struct Side {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Communicator> communicator = CreateSingleRankCommunicator();
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<CacheEngine> cache;

  // Logits of `batch` as host floats [rows, vocab].
  std::vector<float> Forward(const FlatBatch& batch) {
    auto output = model->Forward(batch, cache.get());
    EXPECT_TRUE(output.ok()) << output.status();
    if (!output.ok()) return {};
    std::vector<float> logits(output->logits.num_elements());
    backend->DownloadBytes(output->logits.data, logits.data(), logits.size() * sizeof(float));
    return logits;
  }
};

Side Load(const std::string& dir, std::unique_ptr<Backend> backend, std::optional<DType> dtype,
          bool fp8_kv_cache) {
  Side side;
  side.backend = std::move(backend);
  auto model = LlamaModel::Load(dir, side.backend.get(), side.communicator.get(),
                                LlamaLoadOptions{.weight_dtype = dtype,
                                                 .max_num_batched_tokens = 256,
                                                 .max_num_seqs = 8,
                                                 .block_size = kBlockSize});
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return side;
  side.model = *std::move(model);
  side.cache = std::make_unique<CacheEngine>(
      side.backend.get(),
      side.model->CacheShape(
          kBlockSize, fp8_kv_cache ? DType::kFp8E4M3 : side.backend->default_kv_cache_dtype()),
      kNumBlocks, 0);
  return side;
}

double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

int Argmax(const float* row, int vocab) {
  int best = 0;
  for (int i = 1; i < vocab; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

// Whether the CPU's best logit leads every other by more than bf16 can blur:
// 5% of the row's RMS, five times the 1e-2 relative L2 error the bf16 logits
// are held to (the FP8 cases allow some decisive rows to flip instead). A random-weight model's
// logits are nearly flat, so some rows are near-ties that any rounding may flip; greedy agreement
// is judged on the other rows (and a flip there fails).
bool IsDecisive(const float* row, int vocab) {
  const int best = Argmax(row, vocab);
  double squares = 0;
  float runner_up = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    squares += static_cast<double>(row[i]) * row[i];
    if (i != best) runner_up = std::max(runner_up, row[i]);
  }
  const double rms = std::sqrt(squares / vocab);
  return row[best] - runner_up > 0.05 * rms;
}

class CudaModelTest : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaModelTest, Bf16LogitsFollowCpuF32) {
  const std::string dir = MakeModel(GetParam());
  const bool fp8 = GetParam().fp8_kv_cache;
  // The CPU's weight-only linears take f32 inputs (not the int8 default):
  // the exact weight-only numerics the GPU's int linears compute.
  Side cpu = Load(dir, CreateCpuBackend(0, WeightOnlyActivations::kFloat32), DType::kF32, fp8);
  auto cuda_backend = CudaBackend::Create(0, DType::kBF16);
  ASSERT_TRUE(cuda_backend.ok()) << cuda_backend.status();
  CudaBackend* cuda_raw = cuda_backend->get();
  Side gpu = Load(dir, *std::move(cuda_backend), DType::kBF16, fp8);
  ASSERT_NE(cpu.model, nullptr);
  ASSERT_NE(gpu.model, nullptr);
  ASSERT_TRUE(cuda_raw->status().ok()) << cuda_raw->status();
  const int vocab = cpu.model->config().vocab_size;

  // Three sequences, prompts of 5, 21 and 40 tokens, 4 blocks each apart.
  const std::vector<int> prompt_lens = {5, 21, 40};
  std::vector<std::vector<int32_t>> tokens(prompt_lens.size());
  v1::StepPlan plan;
  for (size_t s = 0; s < prompt_lens.size(); ++s) {
    auto* step = plan.add_sequences();
    step->set_seq_id(s);
    for (int t = 0; t < prompt_lens[s]; ++t) {
      tokens[s].push_back((t * 37 + s * 11 + 3) % vocab);
      step->add_token_ids(tokens[s].back());
    }
    for (int b = 0; b < 4; ++b) step->add_block_table(static_cast<int>(s) * 4 + b);
    step->set_do_sample(true);
  }
  const BatchLimits limits{.vocab_size = vocab,
                           .block_size = kBlockSize,
                           .num_gpu_blocks = kNumBlocks,
                           .num_cpu_blocks = 0};
  int rows = 0, agree = 0, decisive_rows = 0, decisive_agree = 0;
  double worst = 0;
  uint64_t allocations = 0;
  for (int step = 0; step <= kDecodeSteps; ++step) {
    auto batch = FlattenStepPlan(plan, limits);
    ASSERT_TRUE(batch.ok()) << batch.status();
    const std::vector<float> want = cpu.Forward(*batch);
    const std::vector<float> got = gpu.Forward(*batch);
    // The forward allocates no backend memory (workspace reserved at load).
    if (step == 0) allocations = cuda_raw->num_allocations();
    EXPECT_EQ(cuda_raw->num_allocations(), allocations) << "step " << step;
    ASSERT_TRUE(cuda_raw->status().ok()) << cuda_raw->status();
    ASSERT_EQ(got.size(), want.size());
    const double error = RelativeL2(got, want);
    worst = std::max(worst, error);
    EXPECT_LE(error, GetParam().max_relative_l2) << GetParam().name << " step " << step;
    // Next step: every sequence decodes the CPU's greedy token.
    v1::StepPlan next;
    for (size_t s = 0; s < prompt_lens.size(); ++s) {
      const int cpu_token = Argmax(want.data() + s * vocab, vocab);
      const bool same = cpu_token == Argmax(got.data() + s * vocab, vocab);
      agree += same;
      ++rows;
      if (IsDecisive(want.data() + s * vocab, vocab)) {
        decisive_agree += same;
        ++decisive_rows;
      }
      auto* seq = next.add_sequences();
      *seq = plan.sequences(s);
      seq->clear_token_ids();
      seq->add_token_ids(cpu_token);
      seq->set_start_position(static_cast<int>(tokens[s].size()));
      tokens[s].push_back(cpu_token);
    }
    plan = next;
  }
  EXPECT_GE(decisive_rows, rows / 2) << "too few decisive rows to judge greedy agreement";
  EXPECT_GE(decisive_agree, GetParam().min_greedy_agreement * decisive_rows)
      << decisive_agree << " of " << decisive_rows << " decisive greedy tokens agree";
  std::printf("%s: worst relative L2 %.2e, greedy agreement %d/%d (decisive rows %d/%d)\n",
              GetParam().name.c_str(), worst, agree, rows, decisive_agree, decisive_rows);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Models, CudaModelTest,
    ::testing::Values(
        ModelCase{.name = "llama_h64_gqa",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 2 --head-dim 64 --seed 1"},
        ModelCase{.name = "llama_h128_mha",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 2 --num-kv-heads 2 --head-dim 128 --seed 2"},
        ModelCase{.name = "qwen2_bias_tied",
                  .args = "--arch qwen2 --tie-word-embeddings --vocab-size 512 --hidden-size 256 "
                          "--intermediate-size 512 --num-layers 2 --num-heads 4 --num-kv-heads 1 "
                          "--head-dim 64 --seed 3"},
        ModelCase{.name = "llama3_rope_h128_gqa",
                  .args = "--vocab-size 512 --hidden-size 512 --intermediate-size 1024 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 1 --head-dim 128 "
                          "--rope-scaling llama3 --rope-factor 8 "
                          "--rope-original-max-position-embeddings 64 "
                          "--max-position-embeddings 512 --seed 4"},
        ModelCase{.name = "llama_bf16_checkpoint",
                  .args = "--dtype bf16 --vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 8 --num-kv-heads 1 --head-dim 64 --seed 5"},
        // Both caches FP8, head 128, GQA 4.
        ModelCase{.name = "llama_fp8_kv_cache_scales",
                  .args = "--vocab-size 512 --hidden-size 512 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 1 --head-dim 128 --seed 6",
                  .fp8_kv_cache = true,
                  .max_relative_l2 = kFp8MaxRelativeL2,
                  .min_greedy_agreement = kFp8MinGreedyAgreement},
        // FP8 W8A8 linears on both sides (the CPU's CpuW8A8Linear, the GPU's
        // CudaFp8Linear), lm_head dense.
        ModelCase{.name = "ct_fp8_channel_per_token",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 2 --head-dim 64 --seed 7",
                  .quantized_format = "ct-fp8",
                  .quantizer_flags = "--weight-strategy channel",
                  .max_relative_l2 = kFp8MaxRelativeL2,
                  .min_greedy_agreement = kFp8MinGreedyAgreement},
        ModelCase{.name = "ct_fp8_tensor_static",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 1 --head-dim 64 --seed 8",
                  .quantized_format = "ct-fp8",
                  .quantizer_flags = "--weight-strategy tensor --activations static",
                  .max_relative_l2 = kFp8MaxRelativeL2,
                  .min_greedy_agreement = kFp8MinGreedyAgreement},
        // Weight-only int linears on both sides: the weights are the same
        // exactly dequantized values, so the bf16 bounds hold.
        ModelCase{.name = "awq_int4_g32",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 2 --head-dim 64 --seed 9",
                  .quantized_format = "awq",
                  .quantizer_flags = "--group-size 32"},
        ModelCase{.name = "gptq_int8_act_order_g64",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 1 --head-dim 64 --seed 10",
                  .quantized_format = "gptq",
                  .quantizer_flags = "--bits 8 --group-size 64 --desc-act"},
        ModelCase{.name = "ct_w4a16_g128",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 2 --head-dim 64 --seed 11",
                  .quantized_format = "ct",
                  .quantizer_flags = "--group-size 128"},
        // Int8 W8A8 on both sides: the GPU quantizes bf16 activations to
        // int8, the CPU f32 ones, so some inputs take the neighbouring code
        // (the FP8 cases' bounds).
        ModelCase{.name = "ct_w8a8_int8",
                  .args = "--vocab-size 512 --hidden-size 256 --intermediate-size 512 "
                          "--num-layers 2 --num-heads 4 --num-kv-heads 2 --head-dim 64 --seed 12",
                  .quantized_format = "ct-w8a8",
                  .max_relative_l2 = kFp8MaxRelativeL2,
                  .min_greedy_agreement = kFp8MinGreedyAgreement}),
    [](const ::testing::TestParamInfo<ModelCase>& info) { return info.param.name; });

}  // namespace
}  // namespace pagoda::worker
