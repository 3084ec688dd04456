// Checks the CPU Llama forward over a paged KV cache against the float64
// NumPy reference (tests/reference/llama_reference.py) on tiny random models
// made by scripts/make_tiny_model.py: a batched prefill of sequences of
// different lengths (one of them chunked, so its second chunk reads a cached
// prefix), then several decode steps that each compute one token per
// sequence and read all earlier K/V through shuffled, non-contiguous block
// tables.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/cpu/cpu_model_runner.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"
#include "worker/model_runner.h"

namespace pagoda::worker {
namespace {

namespace fs = std::filesystem;
using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;

struct TinyModel {
  std::string name;
  std::string maker_flags;
  int block_size;
};

std::string Env(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

std::string Python() { return Env("PAGODA_PYTHON3", "/usr/bin/python3"); }
std::string SourceDir() { return Env("PAGODA_SOURCE_DIR", "."); }

void RunCommand(const std::string& command) {
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

// The reference's logits of every position of `tokens`: [tokens, vocab].
std::vector<double> ReferenceLogits(const std::string& model_dir, const std::vector<int>& tokens,
                                    int vocab) {
  const std::string out = model_dir + "/reference.f64";
  RunCommand(absl::StrCat(Python(), " ", SourceDir(), "/tests/reference/llama_reference.py logits",
                          " --model ", model_dir, " --tokens ", absl::StrJoin(tokens, ","),
                          " --out ", out, " > /dev/null"));
  std::ifstream file(out, std::ios::binary);
  std::vector<double> logits(tokens.size() * vocab);
  file.read(reinterpret_cast<char*>(logits.data()), logits.size() * sizeof(double));
  EXPECT_EQ(static_cast<size_t>(file.gcount()), logits.size() * sizeof(double));
  return logits;
}

class NumericsReferenceTest : public ::testing::TestWithParam<TinyModel> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/pagoda_numerics_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    model_dir_ = dir_ + "/" + GetParam().name;
    RunCommand(absl::StrCat(Python(), " ", SourceDir(), "/scripts/make_tiny_model.py --out ",
                            model_dir_, " ", GetParam().maker_flags, " > /dev/null"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir_;
  std::string model_dir_;
};

// One sequence of the scenario: its whole token list (prompt + the tokens
// fed at decode steps), its prompt split into prefill chunks, its blocks.
struct Sequence {
  std::vector<int> tokens;
  std::vector<int> chunks;  // Prompt tokens computed at steps 0, 1, ...
  std::vector<int32_t> block_table;
  int computed = 0;
};

// Runs the paged prefill and decode scenario with a `kv_dtype` KV cache and
// checks every row's logits against the float64 reference: max |diff| over
// max |reference| below `tolerance`.
void CheckPagedPrefillAndDecode(const std::string& model_dir_, int block_size, DType kv_dtype,
                                double tolerance) {
  auto backend = CreateCpuBackend();
  auto communicator = CreateSingleRankCommunicator();
  auto model = LlamaModel::Load(model_dir_, backend.get(), communicator.get());
  ASSERT_TRUE(model.ok()) << model.status();
  const int vocab = (*model)->config().vocab_size;
  const int num_blocks = 64;
  CacheEngine cache(backend.get(), (*model)->CacheShape(block_size, kv_dtype), num_blocks, 0);

  std::mt19937 rng(17);
  std::uniform_int_distribution<int> token(0, vocab - 1);
  const int decode_steps = 4;
  // Prompt lengths 11, 3 and 17 (the last in chunks of 9 and 8, so its
  // second chunk runs with a cached prefix alongside the others' decodes).
  std::vector<Sequence> sequences(3);
  sequences[0].chunks = {11};
  sequences[1].chunks = {3};
  sequences[2].chunks = {9, 8};
  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next_block = 0;
  for (Sequence& seq : sequences) {
    const int prompt = std::accumulate(seq.chunks.begin(), seq.chunks.end(), 0);
    const int total = prompt + decode_steps + 1;
    for (int i = 0; i < total; ++i) seq.tokens.push_back(token(rng));
    const int blocks = (total + block_size - 1) / block_size;
    for (int b = 0; b < blocks; ++b) seq.block_table.push_back(pool[next_block++]);
    ++next_block;  // A gap: tables are neither contiguous nor adjacent.
  }
  std::vector<std::vector<double>> reference;
  for (const Sequence& seq : sequences) {
    reference.push_back(ReferenceLogits(model_dir_, seq.tokens, vocab));
  }

  for (int step = 0; step < decode_steps + 1; ++step) {
    StepPlan plan;
    plan.set_step_id(step);
    // (sequence, position) of each token row, to find its reference row.
    std::vector<std::pair<int, int>> rows;
    for (size_t s = 0; s < sequences.size(); ++s) {
      Sequence& seq = sequences[s];
      const int count = step < static_cast<int>(seq.chunks.size()) ? seq.chunks[step] : 1;
      if (seq.computed + count > static_cast<int>(seq.tokens.size())) continue;
      SequenceStep* entry = plan.add_sequences();
      entry->set_seq_id(100 + s);
      entry->set_start_position(seq.computed);
      for (int i = 0; i < count; ++i) {
        entry->add_token_ids(seq.tokens[seq.computed + i]);
        rows.emplace_back(s, seq.computed + i);
      }
      for (int32_t block : seq.block_table) entry->add_block_table(block);
      entry->set_do_sample(true);
      seq.computed += count;
    }
    auto batch = FlattenStepPlan(plan, BatchLimits{vocab, block_size, num_blocks, 0});
    ASSERT_TRUE(batch.ok()) << batch.status();
    // Ask for the logits of every row, not just each sequence's last.
    batch->logits_indices.resize(batch->num_tokens());
    std::iota(batch->logits_indices.begin(), batch->logits_indices.end(), 0);
    auto forward = (*model)->Forward(*batch, &cache);
    ASSERT_TRUE(forward.ok()) << forward.status();
    ASSERT_EQ(forward->logits.num_elements(), static_cast<int64_t>(rows.size() * vocab));
    std::vector<float> logits(rows.size() * vocab);
    backend->DownloadBytes(forward->logits.data, logits.data(), logits.size() * sizeof(float));

    double max_diff = 0.0, max_ref = 0.0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto [s, position] = rows[r];
      for (int v = 0; v < vocab; ++v) {
        const double expected = reference[s][static_cast<size_t>(position) * vocab + v];
        const double actual = logits[r * vocab + v];
        ASSERT_TRUE(std::isfinite(actual)) << "row " << r;
        max_diff = std::max(max_diff, std::abs(actual - expected));
        max_ref = std::max(max_ref, std::abs(expected));
      }
    }
    ASSERT_GT(max_ref, 0.0);
    EXPECT_LT(max_diff / max_ref, tolerance)
        << model_dir_ << " " << DTypeName(kv_dtype) << " KV, step " << step << ": max |diff| "
        << max_diff << ", max |ref| " << max_ref;
  }
}

TEST_P(NumericsReferenceTest, PagedPrefillAndDecodeMatchReference) {
  CheckPagedPrefillAndDecode(model_dir_, GetParam().block_size, DType::kF32, 1e-4);
}

// A bf16 KV cache rounds every cached K and V to 8 significant bits
// (relative error up to 2^-9 = 2e-3); the logits move by about that much of
// their range (1.0e-3 to 1.7e-3 of max |reference| on these models), so the
// bound is 5e-3, against 1e-4 for the f32 cache.
TEST_P(NumericsReferenceTest, PagedPrefillAndDecodeWithBf16KvCacheMatchReference) {
  CheckPagedPrefillAndDecode(model_dir_, GetParam().block_size, DType::kBF16, 5e-3);
}

// The same model through the ModelRunner: greedy prefill of one prompt,
// reporting the reference's log_softmax as logprobs, and the reference's
// top tokens (up to near-ties).
TEST_P(NumericsReferenceTest, ModelRunnerLogprobsMatchReference) {
  auto runner = CreateCpuModelRunner();
  pagoda::worker::v1::LoadModelRequest load;
  load.set_model_dir(model_dir_);
  load.set_block_size(GetParam().block_size);
  load.set_device("cpu");
  load.set_world_size(1);
  load.set_kv_cache_memory_bytes(1 << 22);
  auto loaded = runner->LoadModel(load);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_GT(loaded->num_gpu_blocks(), 8);
  const int vocab = loaded->vocab_size();
  pagoda::worker::v1::InitCacheRequest init;
  init.set_num_gpu_blocks(8);
  ASSERT_TRUE(runner->InitCache(init).ok());

  const std::vector<int> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  StepPlan plan;
  SequenceStep* seq = plan.add_sequences();
  seq->set_seq_id(7);
  for (int t : prompt) seq->add_token_ids(t % vocab);
  for (int b : {6, 2, 4}) seq->add_block_table(b);
  seq->set_do_sample(true);
  seq->mutable_sampling()->set_num_logprobs(5);
  auto result = runner->ExecuteStep(plan);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->tokens_size(), 1);

  std::vector<int> tokens;
  for (int t : prompt) tokens.push_back(t % vocab);
  const std::vector<double> all = ReferenceLogits(model_dir_, tokens, vocab);
  const double* last = all.data() + (tokens.size() - 1) * vocab;
  const double max_logit = *std::max_element(last, last + vocab);
  double sum = 0.0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(last[v] - max_logit);
  auto log_softmax = [&](int v) { return last[v] - max_logit - std::log(sum); };

  const auto& sampled = result->tokens(0);
  EXPECT_EQ(sampled.seq_id(), 7);
  EXPECT_NEAR(sampled.logprob(), log_softmax(sampled.token_id()), 1e-3);
  EXPECT_NEAR(log_softmax(sampled.token_id()), max_logit - max_logit - std::log(sum), 1e-4)
      << "greedy token is not the reference's argmax (beyond a near-tie)";
  ASSERT_EQ(sampled.top_size(), 5);
  EXPECT_EQ(sampled.top(0).token_id(), sampled.token_id());
  for (const auto& top : sampled.top()) {
    EXPECT_NEAR(top.logprob(), log_softmax(top.token_id()), 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(
    TinyModels, NumericsReferenceTest,
    ::testing::Values(
        TinyModel{"llama_gqa_llama3_f16",
                  "--arch llama --vocab-size 96 --hidden-size 64 --intermediate-size 112"
                  " --num-layers 2 --num-heads 8 --num-kv-heads 2 --head-dim 16"
                  " --max-position-embeddings 256 --rope-theta 10000 --rope-scaling llama3"
                  " --rope-factor 8 --rope-original-max-position-embeddings 64"
                  " --dtype f16 --shards 1 --seed 1",
                  4},
        TinyModel{"qwen2_bias_tied_bf16",
                  "--arch qwen2 --vocab-size 80 --hidden-size 64 --intermediate-size 96"
                  " --num-layers 2 --num-heads 4 --num-kv-heads 2 --head-dim 24"
                  " --max-position-embeddings 128 --rope-theta 1000000 --rope-scaling linear"
                  " --rope-factor 2 --tie-word-embeddings --dtype bf16 --shards 1 --seed 2",
                  8},
        TinyModel{"llama_mha_f32_sharded",
                  "--arch llama --vocab-size 72 --hidden-size 48 --intermediate-size 80"
                  " --num-layers 3 --num-heads 4 --num-kv-heads 4"
                  " --max-position-embeddings 128 --rope-theta 10000 --rope-scaling none"
                  " --dtype f32 --shards 3 --seed 3",
                  16}),
    [](const ::testing::TestParamInfo<TinyModel>& info) { return info.param.name; });

}  // namespace
}  // namespace pagoda::worker
