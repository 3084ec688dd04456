#include "common/lora_shard.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda {
namespace {

ModelConfig Base() {
  ModelConfig base;
  base.architecture = "LlamaForCausalLM";
  base.vocab_size = 10;
  base.hidden_size = 8;
  base.intermediate_size = 12;
  base.num_hidden_layers = 1;
  base.num_attention_heads = 4;
  base.num_key_value_heads = 2;
  base.head_dim = 2;
  return base;
}

LoraMatrices Random(const ModelConfig& base, LoraModule module, int rank, int seed) {
  const LinearShape shape = LoraModuleShape(base, module);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  LoraMatrices m{rank, shape.in, shape.out, {}, {}};
  for (int64_t i = 0; i < rank * shape.in; ++i) m.a.push_back(dist(rng));
  for (int64_t i = 0; i < shape.out * rank; ++i) m.b.push_back(dist(rng));
  return m;
}

// B (A x) in double: the update without the scale.
std::vector<double> Update(const LoraMatrices& m, const std::vector<double>& x) {
  std::vector<double> t(m.rank, 0), y(m.out, 0);
  for (int k = 0; k < m.rank; ++k) {
    for (int64_t i = 0; i < m.in; ++i) t[k] += double{m.a[k * m.in + i]} * x[i];
  }
  for (int64_t o = 0; o < m.out; ++o) {
    for (int k = 0; k < m.rank; ++k) y[o] += double{m.b[o * m.rank + k]} * t[k];
  }
  return y;
}

// For each world size and module: column-parallel shards' outputs
// concatenate to the full update; row-parallel shards' partial outputs over
// their input slices sum to it (what the all-reduce computes).
TEST(LoraShardTest, ShardsReassembleTheFullUpdate) {
  const ModelConfig base = Base();
  for (int world : {1, 2, 4}) {
    for (LoraModule module : kAllLoraModules) {
      const LoraMatrices full = Random(base, module, 3, world * 10 + static_cast<int>(module));
      std::vector<double> x(full.in);
      for (int64_t i = 0; i < full.in; ++i) x[i] = 0.5 - 0.1 * i;
      const std::vector<double> expected = Update(full, x);
      std::vector<double> assembled(full.out, 0);
      int64_t next_row = 0;
      for (int rank = 0; rank < world; ++rank) {
        auto shard = PlanTensorParallelShard(base, rank, world);
        ASSERT_TRUE(shard.ok()) << shard.status();
        auto part = ShardLoraMatrices(full, base, *shard, module);
        ASSERT_TRUE(part.ok()) << part.status();
        const IndexRange range = LoraShardRange(base, *shard, module);
        if (IsRowParallel(module)) {
          std::vector<double> x_part(x.begin() + range.begin, x.begin() + range.end);
          const std::vector<double> partial = Update(*part, x_part);
          for (int64_t o = 0; o < full.out; ++o) assembled[o] += partial[o];
        } else {
          const std::vector<double> rows = Update(*part, x);
          // With KV heads replicated over ranks, ranks repeat rows; place by range.
          for (int64_t o = 0; o < part->out; ++o) assembled[range.begin + o] = rows[o];
          next_row = std::max(next_row, range.end);
        }
      }
      if (!IsRowParallel(module)) {
        EXPECT_EQ(next_row, full.out);
      }
      for (int64_t o = 0; o < full.out; ++o) {
        EXPECT_NEAR(assembled[o], expected[o], 1e-9)
            << LoraModuleName(module) << " world " << world << " row " << o;
      }
    }
  }
}

TEST(LoraShardTest, RefusesMatricesOfAnotherShape) {
  const ModelConfig base = Base();
  LoraMatrices wrong = Random(base, LoraModule::kQ, 2, 1);
  auto shard = PlanTensorParallelShard(base, 0, 2);
  ASSERT_TRUE(shard.ok());
  auto part = ShardLoraMatrices(wrong, base, *shard, LoraModule::kDown);
  ASSERT_FALSE(part.ok());
  EXPECT_NE(part.status().message().find("down_proj"), std::string::npos);
}

}  // namespace
}  // namespace pagoda
