// The LoRA loader (common/lora_adapter) and the CPU kernel (worker/lora)
// against the float64 NumPy reference (tests/reference/lora_reference.py):
// random PEFT adapters of several ranks, target sets and dtypes over a tiny
// random model, three of them resident in slots at once with base-model rows
// mixed in; every projection's base output plus LoraSlots::Apply equals the
// reference's x · (W + scale·B·A)ᵀ to 1e-5 relative, on one rank and split
// over two tensor-parallel ranks.

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/lora_adapter.h"
#include "common/lora_shard.h"
#include "common/model_config.h"
#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "tests/support/lora_test_adapters.h"
#include "tests/support/tiny_model.h"
#include "worker/lora/lora_slots.h"

namespace pagoda::worker {
namespace {

namespace fs = std::filesystem;
using ::pagoda::testing::PythonBinary;

constexpr int kLayer = 1;
constexpr int kRows = 9;
constexpr int kMaxRank = 16;
constexpr int kMaxTokens = ::pagoda::testing::kTestMaxTrainableTokens;

using AdapterSpec = ::pagoda::testing::TestAdapterSpec;
const std::vector<AdapterSpec>& Adapters() { return ::pagoda::testing::TestAdapters(); }

void RunCommand(const std::string& command) {
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

std::string Script() { return "tests/reference/lora_reference.py"; }

class LoraReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::pagoda::testing::TempPath("lora_reference"));
    fs::create_directories(*dir_);
    // Sizes unlike the kernels' widths: hidden 24, 4 heads of 6, intermediate 36, GQA 2:1.
    ASSERT_TRUE(
        ::pagoda::testing::WriteTinyModel(Base(),
                                          "--vocab-size 40 --hidden-size 24 --intermediate-size 36 "
                                          "--num-layers 2 --num-heads 4 --num-kv-heads 2")
            .ok());
    for (const AdapterSpec& spec : Adapters()) {
      const absl::Status written =
          ::pagoda::testing::WriteTestAdapter(Base(), *dir_ + "/" + spec.name, spec);
      ASSERT_TRUE(written.ok()) << written;
    }
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Base() { return *dir_ + "/base"; }

  // x · (W + scale·B·A)ᵀ from the reference, [rows, out].
  static std::vector<double> Merged(const std::string& adapter, LoraModule module,
                                    const std::vector<double>& x, int64_t out) {
    const std::string in_path = *dir_ + "/x.f64", out_path = *dir_ + "/y.f64";
    std::ofstream(in_path, std::ios::binary)
        .write(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(double));
    RunCommand(absl::StrCat(PythonBinary(), " ", Script(), " merged-linear --base ", Base(),
                            " --adapter ", *dir_, "/", adapter, " --layer ", kLayer, " --module ",
                            LoraModuleName(module), " --inputs ", in_path, " --out ", out_path));
    std::vector<double> y(x.size() / (x.size() / kRows) * out);
    std::ifstream(out_path, std::ios::binary)
        .read(reinterpret_cast<char*>(y.data()), y.size() * sizeof(double));
    return y;
  }

  // A whole weight of the base model, merged with `adapter`'s update when
  // not empty, from the reference (float64, row-major).
  static std::vector<double> MergedWeight(const std::string& adapter, const std::string& name,
                                          size_t size, const std::string& base = Base()) {
    const std::string out_path = *dir_ + "/w.f64";
    RunCommand(absl::StrCat(PythonBinary(), " ", Script(), " merged-weight --base ", base,
                            adapter.empty() ? "" : absl::StrCat(" --adapter ", *dir_, "/", adapter),
                            " --name ", name, " --out ", out_path));
    std::vector<double> w(size);
    std::ifstream(out_path, std::ios::binary)
        .read(reinterpret_cast<char*>(w.data()), w.size() * sizeof(double));
    return w;
  }

  static std::string* dir_;
};
std::string* LoraReferenceTest::dir_ = nullptr;

// x · Wᵀ of the base model's f32 weights, in double, rounded to f32: what
// the base Linear's Forward gives (to its own f32 rounding).
std::vector<float> BaseOutput(const WeightStore& weights, LoraModule module,
                              const ModelConfig& config, const std::vector<float>& x) {
  const LinearShape shape = LoraModuleShape(config, module);
  const std::string name = absl::StrCat("model.layers.", kLayer, ".", LoraModuleParent(module), ".",
                                        LoraModuleName(module), ".weight");
  auto w = weights.GetF32(name, {shape.out, shape.in});
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<float> y(kRows * shape.out);
  for (int r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < shape.out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < shape.in; ++i)
        sum += double{(*w)[o * shape.in + i]} * x[r * shape.in + i];
      y[r * shape.out + o] = static_cast<float>(sum);
    }
  }
  return y;
}

std::array<LinearShape, kNumLoraModules> ShapesFor(const ModelConfig& config,
                                                   const TensorParallelShard* shard) {
  std::array<LinearShape, kNumLoraModules> shapes;
  for (LoraModule module : kAllLoraModules) {
    LinearShape shape = LoraModuleShape(config, module);
    if (shard != nullptr) {
      const int64_t part = LoraShardRange(config, *shard, module).size();
      (IsRowParallel(module) ? shape.in : shape.out) = part;
    }
    shapes[static_cast<int>(module)] = shape;
  }
  return shapes;
}

// Rows 0..8 use slots 1, 0, 2, 3, 1, 0, 3, 2, 1: every adapter and the base.
const int32_t kRowSlots[kRows] = {1, 0, 2, 3, 1, 0, 3, 2, 1};

// Whether adapter `a` (slot a+1) targets `module`.
bool Targets(const std::vector<LoraAdapter>& adapters, int a, LoraModule module) {
  return adapters[a].layers[kLayer][static_cast<int>(module)].has_value();
}

void ExpectClose(const std::vector<float>& got, const std::vector<double>& expected,
                 const std::string& what) {
  double scale = 0;
  for (double e : expected) scale = std::max(scale, std::abs(e));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], expected[i], 1e-5 * scale) << what << " element " << i;
  }
}

TEST_F(LoraReferenceTest, SlotsReproduceTheMergedLinearOnOneAndTwoRanks) {
  auto config = LoadModelConfig(Base());
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = WeightStore::Open(Base());
  ASSERT_TRUE(weights.ok()) << weights.status();
  std::vector<LoraAdapter> adapters;
  for (const AdapterSpec& spec : Adapters()) {
    auto adapter = LoadLoraAdapter(*dir_ + "/" + spec.name, *config, kMaxRank, kMaxTokens);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    adapters.push_back(*std::move(adapter));
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  for (LoraModule module : kAllLoraModules) {
    const LinearShape shape = LoraModuleShape(*config, module);
    std::vector<float> x(kRows * shape.in);
    for (float& v : x) v = normal(rng);
    const std::vector<double> x64(x.begin(), x.end());
    // The expected rows: each row from the merged weights of its slot's
    // adapter, or the base weights where the row or adapter leaves it alone.
    std::vector<double> expected(kRows * shape.out);
    const std::vector<float> base = BaseOutput(**weights, module, *config, x);
    for (int r = 0; r < kRows; ++r) {
      for (int64_t o = 0; o < shape.out; ++o) expected[r * shape.out + o] = base[r * shape.out + o];
    }
    for (int a = 0; a < 3; ++a) {
      if (!Targets(adapters, a, module)) continue;
      const std::vector<double> merged = Merged(Adapters()[a].name, module, x64, shape.out);
      for (int r = 0; r < kRows; ++r) {
        if (kRowSlots[r] != a + 1) continue;
        for (int64_t o = 0; o < shape.out; ++o) {
          expected[r * shape.out + o] = merged[r * shape.out + o];
        }
      }
    }
    // One rank.
    LoraSlots slots(3, kMaxRank, config->num_hidden_layers, ShapesFor(*config, nullptr));
    slots.SetVocabulary(config->vocab_size, config->hidden_size, kMaxTokens);
    for (int a = 0; a < 3; ++a) ASSERT_TRUE(slots.Load(a + 1, adapters[a]).ok());
    std::vector<float> y = base;
    ASSERT_TRUE(slots.Apply(x.data(), kRows, kRowSlots, {kLayer, module}, y.data()).ok());
    ExpectClose(y, expected, std::string(LoraModuleName(module)));

    // Two ranks: column-parallel outputs side by side, row-parallel partial
    // sums added (the all-reduce), the base output added once.
    std::vector<float> assembled = IsRowParallel(module) ? base : std::vector<float>(base.size());
    for (int rank = 0; rank < 2; ++rank) {
      auto shard = PlanTensorParallelShard(*config, rank, 2);
      ASSERT_TRUE(shard.ok());
      const IndexRange range = LoraShardRange(*config, *shard, module);
      LoraSlots part(3, kMaxRank, config->num_hidden_layers, ShapesFor(*config, &*shard));
      part.SetVocabulary(config->vocab_size, config->hidden_size, kMaxTokens);
      for (int a = 0; a < 3; ++a) {
        auto sharded = ShardLoraAdapter(adapters[a], *config, *shard);
        ASSERT_TRUE(sharded.ok()) << sharded.status();
        ASSERT_TRUE(part.Load(a + 1, *sharded).ok());
      }
      const LinearShape local = ShapesFor(*config, &*shard)[static_cast<int>(module)];
      std::vector<float> x_local(kRows * local.in), y_local(kRows * local.out, 0.0f);
      for (int r = 0; r < kRows; ++r) {
        for (int64_t i = 0; i < local.in; ++i) {
          x_local[r * local.in + i] =
              x[r * shape.in + (IsRowParallel(module) ? range.begin + i : i)];
        }
        if (!IsRowParallel(module)) {  // This rank's base rows.
          for (int64_t o = 0; o < local.out; ++o) {
            y_local[r * local.out + o] = base[r * shape.out + range.begin + o];
          }
        }
      }
      ASSERT_TRUE(
          part.Apply(x_local.data(), kRows, kRowSlots, {kLayer, module}, y_local.data()).ok());
      for (int r = 0; r < kRows; ++r) {
        for (int64_t o = 0; o < local.out; ++o) {
          const int64_t col = IsRowParallel(module) ? o : range.begin + o;
          assembled[r * shape.out + col] += y_local[r * local.out + o];
        }
      }
    }
    ExpectClose(assembled, expected, absl::StrCat(LoraModuleName(module), " over 2 ranks"));
  }
}

// The tables a check of embed_tokens and lm_head compares with, float64
// [vocab, hidden]: the base model's, and those merged with the adapter in
// `slot` (other slots keep the base's).
struct VocabularyTables {
  int64_t vocab = 0, hidden = 0;
  std::vector<double> base_embed, base_head, embed, head;
  int slot = 0;
};

// ApplyEmbedding over the base rows of `token_ids` gives each row its
// slot's merged rows; ApplyLmHead over random rows' base logits gives its
// slot's merged head's logits.
void ExpectVocabularyUpdates(const LoraSlots::View& view, const VocabularyTables& t,
                             const std::vector<int32_t>& token_ids,
                             const std::vector<int32_t>& row_slots, int seed) {
  const int rows = static_cast<int>(token_ids.size());
  const int64_t hidden = t.hidden, vocab = t.vocab;
  std::vector<float> y(rows * hidden);
  std::vector<double> expected(y.size());
  for (int r = 0; r < rows; ++r) {
    const std::vector<double>& merged = row_slots[r] == t.slot ? t.embed : t.base_embed;
    for (int64_t h = 0; h < hidden; ++h) {
      y[r * hidden + h] = static_cast<float>(t.base_embed[token_ids[r] * hidden + h]);
      expected[r * hidden + h] = merged[token_ids[r] * hidden + h];
    }
  }
  ASSERT_TRUE(view.ApplyEmbedding(token_ids.data(), rows, row_slots.data(), y.data()).ok());
  ExpectClose(y, expected, "embed_tokens");

  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * hidden);
  for (float& v : x) v = normal(rng);
  std::vector<float> logits(rows * vocab);
  expected.assign(logits.size(), 0);
  for (int r = 0; r < rows; ++r) {
    const std::vector<double>& head = row_slots[r] == t.slot ? t.head : t.base_head;
    for (int64_t v = 0; v < vocab; ++v) {
      double base = 0, merged = 0;
      for (int64_t h = 0; h < hidden; ++h) {
        base += t.base_head[v * hidden + h] * x[r * hidden + h];
        merged += head[v * hidden + h] * x[r * hidden + h];
      }
      logits[r * vocab + v] = static_cast<float>(base);
      expected[r * vocab + v] = merged;
    }
  }
  ASSERT_TRUE(view.ApplyLmHead(x.data(), rows, row_slots.data(), logits.data()).ok());
  ExpectClose(logits, expected, "lm_head");
}

// embed_tokens and lm_head: a row's embedding and logits are those of its
// slot's merged weights (the third test adapter updates both; the others
// leave them alone), the embedding row for each token id, the logits on
// every vocabulary entry.
TEST_F(LoraReferenceTest, EmbeddingAndHeadUpdatesReproduceTheMergedWeights) {
  auto config = LoadModelConfig(Base());
  ASSERT_TRUE(config.ok()) << config.status();
  const int64_t vocab = config->vocab_size, hidden = config->hidden_size;
  LoraSlots slots(3, kMaxRank, config->num_hidden_layers, ShapesFor(*config, nullptr));
  slots.SetVocabulary(vocab, hidden, kMaxTokens);
  for (int a = 0; a < 3; ++a) {
    auto adapter = LoadLoraAdapter(*dir_ + "/" + Adapters()[a].name, *config, kMaxRank, kMaxTokens);
    ASSERT_TRUE(adapter.ok()) << adapter.status();
    ASSERT_EQ(adapter->lm_head.has_value(), a == 2);
    ASSERT_EQ(adapter->embed_token_rows.has_value(), a == 2);  // Token 17 (row 3) among them.
    ASSERT_EQ(adapter->lm_head_token_rows.has_value(), a == 2);
    ASSERT_TRUE(slots.Load(a + 1, *adapter).ok());
  }
  const size_t table = vocab * hidden;
  const std::vector<double> base_embed = MergedWeight("", "model.embed_tokens.weight", table);
  const std::vector<double> base_head = MergedWeight("", "lm_head.weight", table);
  const std::string adapter = Adapters()[2].name;
  const std::vector<double> embed = MergedWeight(adapter, "model.embed_tokens.weight", table);
  const std::vector<double> head = MergedWeight(adapter, "lm_head.weight", table);
  ASSERT_NE(embed, base_embed);
  ASSERT_NE(head, base_head);

  ExpectVocabularyUpdates(slots.Snapshot(), {vocab, hidden, base_embed, base_head, embed, head, 3},
                          {0, 5, 39, 17, 39, 2, 8, 0, 21},
                          std::vector<int32_t>(kRowSlots, kRowSlots + kRows), 23);

  const LoraSlots::View view = slots.Snapshot();
  std::vector<float> y(hidden);
  const int32_t bad_token[1] = {40};
  const int32_t slot3[1] = {3};
  EXPECT_EQ(view.ApplyEmbedding(bad_token, 1, slot3, y.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

// A tied base's head is its embedding: PEFT's list of trainable tokens
// replaces those tokens' embedding rows and, through the shared matrix,
// their logits (x · row), as the reference's merged weights give them.
TEST_F(LoraReferenceTest, TrainableTokensOfATiedBaseReplaceItsHeadRowsToo) {
  const std::string base = *dir_ + "/tied", adapter_dir = *dir_ + "/tied_tokens";
  ASSERT_TRUE(::pagoda::testing::WriteTinyModel(
                  base,
                  "--vocab-size 40 --hidden-size 24 --intermediate-size 36 --num-layers 2 "
                  "--num-heads 4 --num-kv-heads 2 --tie-word-embeddings")
                  .ok());
  RunCommand(absl::StrCat(PythonBinary(), " ", Script(), " make --base ", base, " --out ",
                          adapter_dir, " --rank 2 --alpha 4 --targets q_proj --seed 3",
                          " --trainable-tokens 39,5,17"));
  auto config = LoadModelConfig(base);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->tie_word_embeddings);
  const int64_t vocab = config->vocab_size, hidden = config->hidden_size;
  auto adapter = LoadLoraAdapter(adapter_dir, *config, kMaxRank, kMaxTokens);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  LoraSlots slots(1, kMaxRank, config->num_hidden_layers, ShapesFor(*config, nullptr));
  slots.SetVocabulary(vocab, hidden, kMaxTokens);
  ASSERT_TRUE(slots.Load(1, *adapter).ok());
  const size_t table = vocab * hidden;
  const std::vector<double> table_base = MergedWeight("", "model.embed_tokens.weight", table, base);
  const std::vector<double> embed =
      MergedWeight("tied_tokens", "model.embed_tokens.weight", table, base);
  const std::vector<double> head = MergedWeight("tied_tokens", "lm_head.weight", table, base);
  ASSERT_NE(head, table_base);

  ExpectVocabularyUpdates(slots.Snapshot(), {vocab, hidden, table_base, table_base, embed, head, 1},
                          {5, 6, 39, 17, 5}, {1, 1, 0, 1, 0}, 29);
}

}  // namespace
}  // namespace pagoda::worker
