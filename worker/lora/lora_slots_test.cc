#include "worker/lora/lora_slots.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/cpu/simd.h"
#include "worker/lora/lora_kernel.h"

namespace pagoda::worker {
namespace {

std::vector<float> Random(size_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

// An adapter touching only `module` in every layer.
LoraAdapter MakeAdapter(int layers, LoraModule module, LinearShape shape, int rank, float scale,
                        std::mt19937& rng) {
  LoraAdapter adapter;
  adapter.scale = scale;
  adapter.layers.resize(layers);
  for (auto& layer : adapter.layers) {
    layer[static_cast<int>(module)] = LoraMatrices{
        rank, shape.in, shape.out, Random(rank * shape.in, rng), Random(shape.out * rank, rng)};
  }
  return adapter;
}

// The plain reference in double: scale · B (A x) for one row.
std::vector<double> Reference(const LoraMatrices& m, float scale, const float* x) {
  std::vector<double> t(m.rank, 0), y(m.out, 0);
  for (int k = 0; k < m.rank; ++k) {
    for (int64_t i = 0; i < m.in; ++i) t[k] += double{m.a[k * m.in + i]} * x[i];
  }
  for (int64_t o = 0; o < m.out; ++o) {
    for (int k = 0; k < m.rank; ++k) y[o] += double{m.b[o * m.rank + k]} * t[k];
    y[o] *= scale;
  }
  return y;
}

std::array<LinearShape, kNumLoraModules> Shapes(LinearShape all) {
  std::array<LinearShape, kNumLoraModules> shapes;
  shapes.fill(all);
  return shapes;
}

struct Case {
  int rank;
  int64_t in;
  int64_t out;
};

// Three adapters of one rank in three of four slots (slot 4 stays empty),
// rows of every slot and of the base model interleaved in one batch, at
// every SIMD level.
TEST(LoraSlotsTest, MixedSlotsMatchThePlainReferenceOverOddShapes) {
  std::mt19937 rng(7);
  for (SimdLevel level : SupportedSimdLevels()) {
    for (Case c : {Case{1, 1, 1}, Case{1, 7, 13}, Case{2, 65, 3}, Case{3, 129, 67}, Case{7, 33, 95},
                   Case{16, 128, 129}, Case{33, 17, 257}, Case{64, 255, 31}}) {
      const LinearShape shape{c.out, c.in};
      LoraSlots slots(4, 64, 2, Shapes(shape), SimdKernelsFor(level));
      std::vector<LoraAdapter> adapters;
      for (int s = 1; s <= 3; ++s) {
        adapters.push_back(MakeAdapter(2, LoraModule::kUp, shape, c.rank, 0.5f * s, rng));
        ASSERT_TRUE(slots.Load(s, adapters.back()).ok());
      }
      const int rows = 23;
      std::vector<int32_t> row_slots(rows);
      for (int r = 0; r < rows; ++r) row_slots[r] = (r * 7) % 5;  // 0..4, shuffled.
      const std::vector<float> x = Random(rows * c.in, rng);
      const std::vector<float> y0 = Random(rows * c.out, rng);
      std::vector<float> y = y0;
      ASSERT_TRUE(
          slots.Apply(x.data(), rows, row_slots.data(), {1, LoraModule::kUp}, y.data()).ok());
      for (int r = 0; r < rows; ++r) {
        const int s = row_slots[r];
        if (s == 0 || s == 4) {  // The base model and an empty slot: untouched, bit for bit.
          for (int64_t o = 0; o < c.out; ++o) ASSERT_EQ(y[r * c.out + o], y0[r * c.out + o]);
          continue;
        }
        const LoraMatrices& m = *adapters[s - 1].layers[1][static_cast<int>(LoraModule::kUp)];
        const std::vector<double> delta = Reference(m, adapters[s - 1].scale, &x[r * c.in]);
        for (int64_t o = 0; o < c.out; ++o) {
          const double expected = y0[r * c.out + o] + delta[o];
          ASSERT_NEAR(y[r * c.out + o], expected, 1e-5 * (1 + std::abs(expected)) * c.rank)
              << SimdLevelName(level) << " rank " << c.rank << " in " << c.in << " out " << c.out
              << " row " << r;
        }
      }
    }
  }
}

// A fused output's module (rows of `stride` elements, the module's `out`
// at an offset) and tasks spread over ranges (as the thread pool spreads
// them, one to three tasks at a time; each slot's 75 rows make four tasks
// of at most kLoraRowsPerCall): the same sums as one contiguous call, the
// rest of each row and a pinned view's old adapter left as they were.
TEST(LoraSlotsTest, StridedOutputsSplitRangesAndPinnedViews) {
  std::mt19937 rng(11);
  const LinearShape shape{19, 37};
  LoraSlots slots(3, 8, 1, Shapes(shape));
  for (int s = 1; s <= 3; ++s) {
    ASSERT_TRUE(slots.Load(s, MakeAdapter(1, LoraModule::kK, shape, 2 + s, 0.7f, rng)).ok());
  }
  const int rows = 300;
  const int64_t stride = 50, offset = 11;
  std::vector<int32_t> row_slots(rows);
  for (int r = 0; r < rows; ++r) row_slots[r] = (r * 5) % 4;
  const std::vector<float> x = Random(rows * shape.in, rng);
  std::vector<float> contiguous(rows * shape.out, 0.f);
  const LoraSlots::View view = slots.Snapshot();
  ASSERT_TRUE(
      view.Apply(x.data(), rows, row_slots.data(), {0, LoraModule::kK}, contiguous.data()).ok());
  const std::vector<float> fused0 = Random(rows * stride, rng);
  std::vector<float> fused = fused0;
  int calls = 0;
  const LoraParallelFor uneven = [&](int64_t n, int64_t, const auto& fn) {
    for (int64_t begin = 0, width = 1; begin < n; begin += width, width = width % 3 + 1) {
      fn(begin, std::min(n, begin + width));
      ++calls;
    }
  };
  // Replacing a slot after the view was taken changes nothing it applies.
  ASSERT_TRUE(slots.Load(2, MakeAdapter(1, LoraModule::kK, shape, 4, 9.f, rng)).ok());
  slots.Unload(3);
  ASSERT_TRUE(view.Apply(x.data(), rows, row_slots.data(), {0, LoraModule::kK},
                         fused.data() + offset, stride, &uneven)
                  .ok());
  static_assert(kLoraRowsPerCall < 75);
  EXPECT_GT(calls, 3);
  for (int r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < stride; ++j) {
      const bool in_module = j >= offset && j < offset + shape.out;
      const float expected =
          fused0[r * stride + j] + (in_module ? contiguous[r * shape.out + (j - offset)] : 0.f);
      ASSERT_NEAR(fused[r * stride + j], expected, 1e-5f) << "row " << r << " column " << j;
    }
  }
  EXPECT_FALSE(slots.Snapshot().loaded(3));
  EXPECT_TRUE(view.loaded(3));
}

TEST(LoraSlotsTest, ProjectionsTheAdapterLeavesAloneAreUntouched) {
  std::mt19937 rng(3);
  const LinearShape shape{5, 9};
  LoraSlots slots(2, 8, 2, Shapes(shape));
  ASSERT_TRUE(slots.Load(1, MakeAdapter(2, LoraModule::kQ, shape, 4, 1, rng)).ok());
  const std::vector<float> x = Random(2 * 9, rng);
  std::vector<float> y(2 * 5, 1.0f);
  const int32_t row_slots[] = {1, 1};
  ASSERT_TRUE(slots.Apply(x.data(), 2, row_slots, {0, LoraModule::kV}, y.data()).ok());
  EXPECT_EQ(y, std::vector<float>(2 * 5, 1.0f));
  ASSERT_TRUE(slots.Apply(x.data(), 2, row_slots, {0, LoraModule::kQ}, y.data()).ok());
  EXPECT_NE(y, std::vector<float>(2 * 5, 1.0f));
  // Unloaded, the slot's rows get nothing.
  slots.Unload(1);
  std::vector<float> z(2 * 5, 1.0f);
  ASSERT_TRUE(slots.Apply(x.data(), 2, row_slots, {0, LoraModule::kQ}, z.data()).ok());
  EXPECT_EQ(z, std::vector<float>(2 * 5, 1.0f));
}

TEST(LoraSlotsTest, RefusesBadSlotsShapesAndRanks) {
  std::mt19937 rng(5);
  const LinearShape shape{5, 9};
  LoraSlots slots(2, 8, 2, Shapes(shape));
  const LoraAdapter good = MakeAdapter(2, LoraModule::kQ, shape, 4, 1, rng);
  EXPECT_FALSE(slots.Load(0, good).ok());
  EXPECT_FALSE(slots.Load(3, good).ok());
  EXPECT_FALSE(slots.Load(1, MakeAdapter(2, LoraModule::kQ, shape, 9, 1, rng)).ok());
  EXPECT_FALSE(slots.Load(1, MakeAdapter(2, LoraModule::kQ, {5, 8}, 4, 1, rng)).ok());
  EXPECT_FALSE(slots.Load(1, MakeAdapter(3, LoraModule::kQ, shape, 4, 1, rng)).ok());
  const std::vector<float> x(9), y0(5, 1.0f);
  std::vector<float> y = y0;
  const int32_t bad_slot[] = {3};
  EXPECT_FALSE(slots.Apply(x.data(), 1, bad_slot, {0, LoraModule::kQ}, y.data()).ok());
  const int32_t ok_slot[] = {1};
  EXPECT_FALSE(slots.Apply(x.data(), 1, ok_slot, {2, LoraModule::kQ}, y.data()).ok());
  EXPECT_EQ(y, y0);
}

// embed_tokens and lm_head updates (vocabulary 11, hidden 7, odd sizes):
// against the plain reference, taken only once SetVocabulary gave the
// shapes.
TEST(LoraSlotsTest, EmbeddingAndHeadUpdatesFollowThePlainReference) {
  std::mt19937 rng(9);
  const int64_t vocab = 11, hidden = 7;
  const int rank = 3;
  LoraAdapter adapter = MakeAdapter(1, LoraModule::kQ, {5, 9}, 2, 1, rng);
  adapter.scale = 0.75f;
  adapter.embed_tokens = LoraMatrices{rank, vocab, hidden, Random(rank * vocab, rng),
                                      Random(hidden * rank, rng)};
  adapter.lm_head = LoraMatrices{rank, hidden, vocab, Random(rank * hidden, rng),
                                 Random(vocab * rank, rng)};
  LoraSlots slots(2, 8, 1, Shapes({5, 9}));
  EXPECT_FALSE(slots.Load(1, adapter).ok()) << "taken before SetVocabulary";
  slots.SetVocabulary(vocab, hidden);
  LoraAdapter wrong_vocab = adapter;
  wrong_vocab.embed_tokens->in = vocab + 1;
  EXPECT_FALSE(slots.Load(1, wrong_vocab).ok());
  ASSERT_TRUE(slots.Load(2, adapter).ok());

  const int32_t token_ids[] = {10, 0, 4};
  const int32_t row_slots[] = {2, 0, 2};
  std::vector<float> y(3 * hidden, 0.5f);
  const LoraSlots::View view = slots.Snapshot();
  ASSERT_TRUE(view.ApplyEmbedding(token_ids, 3, row_slots, y.data()).ok());
  for (int r = 0; r < 3; ++r) {
    std::vector<float> one_hot(vocab, 0.0f);
    one_hot[token_ids[r]] = 1;
    const std::vector<double> delta = Reference(*adapter.embed_tokens, 0.75f, one_hot.data());
    for (int64_t h = 0; h < hidden; ++h) {
      EXPECT_NEAR(y[r * hidden + h], 0.5 + (row_slots[r] == 2 ? delta[h] : 0), 1e-5);
    }
  }
  const std::vector<float> x = Random(3 * hidden, rng);
  std::vector<float> logits(3 * (vocab + 2), 0.25f);  // Rows vocab + 2 apart.
  ASSERT_TRUE(view.ApplyLmHead(x.data(), 3, row_slots, logits.data(), vocab + 2).ok());
  for (int r = 0; r < 3; ++r) {
    const std::vector<double> delta = Reference(*adapter.lm_head, 0.75f, x.data() + r * hidden);
    for (int64_t v = 0; v < vocab + 2; ++v) {
      const double moved = row_slots[r] == 2 && v < vocab ? delta[v] : 0;
      EXPECT_NEAR(logits[r * (vocab + 2) + v], 0.25 + moved, 1e-5) << r << " " << v;
    }
  }
  const int32_t bad_token[] = {11};
  EXPECT_FALSE(view.ApplyEmbedding(bad_token, 1, row_slots, y.data()).ok());
}


// Trainable tokens: a listed token's embedding row is its replacement row
// (over the LoRA update: vLLM's order), and its logit x · row; other tokens,
// other slots and slot 0 keep what the LoRA update gives. The ids arrive
// unsorted, as PEFT's config lists them.
TEST(LoraSlotsTest, TrainableTokenRowsReplaceEmbeddingRowsAndLogits) {
  std::mt19937 rng(13);
  const int64_t vocab = 11, hidden = 7;
  LoraAdapter adapter = MakeAdapter(1, LoraModule::kQ, {5, 9}, 2, 1, rng);
  adapter.scale = 0.5f;
  adapter.embed_tokens = LoraMatrices{2, vocab, hidden, Random(2 * vocab, rng),
                                      Random(hidden * 2, rng)};
  adapter.embed_token_rows = LoraTokenRows{{9, 4}, Random(2 * hidden, rng)};
  adapter.lm_head_token_rows = LoraTokenRows{{10, 0, 3}, Random(3 * hidden, rng)};
  LoraSlots slots(2, 8, 1, Shapes({5, 9}));
  slots.SetVocabulary(vocab, hidden, 2);
  EXPECT_THAT(std::string(slots.Load(1, adapter).message()),
              ::testing::HasSubstr("at most 2 (--max-lora-trainable-tokens)"));
  slots.SetVocabulary(vocab, hidden, 3);
  LoraAdapter bad_id = adapter;
  bad_id.embed_token_rows->ids[0] = 11;
  EXPECT_FALSE(slots.Load(1, bad_id).ok());
  ASSERT_TRUE(slots.Load(1, adapter).ok());

  const int32_t token_ids[] = {4, 4, 5, 9};
  const int32_t row_slots[] = {1, 0, 1, 1};
  std::vector<float> y(4 * hidden, 0.5f);
  const LoraSlots::View view = slots.Snapshot();
  ASSERT_TRUE(view.ApplyEmbedding(token_ids, 4, row_slots, y.data()).ok());
  for (int r = 0; r < 4; ++r) {
    std::vector<float> one_hot(vocab, 0.0f);
    one_hot[token_ids[r]] = 1;
    const std::vector<double> delta = Reference(*adapter.embed_tokens, 0.5f, one_hot.data());
    const int replaced = token_ids[r] == 9 ? 0 : token_ids[r] == 4 ? 1 : -1;
    const float* row = adapter.embed_token_rows->rows.data() + replaced * hidden;
    for (int64_t h = 0; h < hidden; ++h) {
      const double expected = row_slots[r] == 0 ? 0.5 : replaced >= 0 ? row[h] : 0.5 + delta[h];
      EXPECT_NEAR(y[r * hidden + h], expected, 1e-6) << r << " " << h;
    }
  }
  const std::vector<float> x = Random(2 * hidden, rng);
  const int32_t head_slots[] = {0, 1};
  std::vector<float> logits(2 * vocab, 0.25f);
  ASSERT_TRUE(view.ApplyLmHead(x.data(), 2, head_slots, logits.data()).ok());
  for (int64_t v = 0; v < vocab; ++v) {
    EXPECT_EQ(logits[v], 0.25f) << v;
    const auto& ids = adapter.lm_head_token_rows->ids;
    const auto it = std::find(ids.begin(), ids.end(), v);
    double expected = 0.25;
    if (it != ids.end()) {
      expected = 0;
      const float* w = adapter.lm_head_token_rows->rows.data() + (it - ids.begin()) * hidden;
      for (int64_t h = 0; h < hidden; ++h) expected += double{x[hidden + h]} * w[h];
    }
    EXPECT_NEAR(logits[vocab + v], expected, 1e-5) << v;
  }
}

}  // namespace
}  // namespace pagoda::worker
