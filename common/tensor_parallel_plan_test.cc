#include "common/tensor_parallel_plan.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda {
namespace {

ModelConfig Config(int heads, int kv_heads, int intermediate, int vocab) {
  ModelConfig config;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.intermediate_size = intermediate;
  config.vocab_size = vocab;
  config.hidden_size = heads * 4;
  config.head_dim = 4;
  return config;
}

// Every rank's shard, checked against the properties any valid split has.
void CheckSplit(const ModelConfig& config, int world) {
  SCOPED_TRACE("heads " + std::to_string(config.num_attention_heads) + " kv " +
               std::to_string(config.num_key_value_heads) + " world " + std::to_string(world));
  const int group = config.num_attention_heads / config.num_key_value_heads;
  int64_t next_q = 0, next_intermediate = 0, next_vocab = 0;
  std::vector<int> kv_holders(config.num_key_value_heads, 0);
  for (int rank = 0; rank < world; ++rank) {
    auto shard = PlanTensorParallelShard(config, rank, world);
    ASSERT_TRUE(shard.ok()) << shard.status();
    // Query heads, MLP channels and vocabulary: contiguous, disjoint, covering.
    EXPECT_EQ(shard->q_heads.begin, next_q);
    EXPECT_EQ(shard->q_heads.size(), config.num_attention_heads / world);
    next_q = shard->q_heads.end;
    EXPECT_EQ(shard->intermediate.begin, next_intermediate);
    next_intermediate = shard->intermediate.end;
    EXPECT_EQ(shard->vocab.begin, next_vocab);
    EXPECT_GE(shard->vocab.size(), 0);
    next_vocab = shard->vocab.end;
    // Every query head the rank owns reads a KV head the rank holds.
    for (int64_t h = shard->q_heads.begin; h < shard->q_heads.end; ++h) {
      EXPECT_GE(h / group, shard->kv_heads.begin);
      EXPECT_LT(h / group, shard->kv_heads.end);
    }
    for (int64_t k = shard->kv_heads.begin; k < shard->kv_heads.end; ++k) ++kv_holders[k];
  }
  EXPECT_EQ(next_q, config.num_attention_heads);
  EXPECT_EQ(next_intermediate, config.intermediate_size);
  EXPECT_EQ(next_vocab, config.vocab_size);
  const int replicas = std::max(1, world / config.num_key_value_heads);
  for (int holders : kv_holders) EXPECT_EQ(holders, replicas);
}

TEST(TensorParallelPlanTest, MultiHeadAttention) {
  for (int world : {1, 2, 4, 8}) CheckSplit(Config(8, 8, 96, 1001), world);
}

TEST(TensorParallelPlanTest, GroupedQueryAttentionIncludingFewerKvHeadsThanRanks) {
  for (int world : {1, 2, 4, 8}) CheckSplit(Config(8, 2, 96, 1001), world);
  for (int world : {1, 2, 4}) CheckSplit(Config(12, 4, 36, 37), world);
  CheckSplit(Config(4, 1, 8, 5), 4);  // Multi-query: every rank holds the one KV head.
}

TEST(TensorParallelPlanTest, KvHeadsShardedOrReplicated) {
  auto shard = PlanTensorParallelShard(Config(8, 2, 96, 1001), 3, 4);
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(shard->q_heads, (IndexRange{6, 8}));
  EXPECT_EQ(shard->kv_heads, (IndexRange{1, 2}));
  EXPECT_EQ(shard->kv_head_replicas, 2);
  EXPECT_EQ(shard->intermediate, (IndexRange{72, 96}));
  // vLLM's padding: 1001 rows padded to 1024, 256 per rank.
  EXPECT_EQ(shard->vocab, (IndexRange{768, 1001}));
  EXPECT_EQ(VocabParallelRowsPerRank(1001, 4), 256);
  EXPECT_EQ(VocabParallelRange(1001, 1, 4), (IndexRange{256, 512}));
  EXPECT_EQ(VocabParallelRange(48, 1, 2), (IndexRange{32, 48}));  // 48 padded to 64.
  EXPECT_EQ(VocabParallelRange(72, 3, 4), (IndexRange{72, 72}));  // 128 / 4: rank 3 all padding.
  shard = PlanTensorParallelShard(Config(8, 4, 96, 1001), 1, 2);
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(shard->kv_heads, (IndexRange{2, 4}));
  EXPECT_EQ(shard->kv_head_replicas, 1);
}

TEST(TensorParallelPlanTest, TinyVocabularyLeavesLastRanksEmpty) {
  auto shard = PlanTensorParallelShard(Config(4, 4, 8, 3), 3, 4);
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(shard->vocab.size(), 0);
}

TEST(TensorParallelPlanTest, IndivisibleCountsAreRefusedInOneLineNamingThem) {
  struct Case {
    ModelConfig config;
    int world;
    std::string names;
  };
  for (const Case& c : {Case{Config(6, 6, 96, 100), 4, "num_attention_heads (6)"},
                        Case{Config(6, 3, 96, 100), 2, "num_key_value_heads (3)"},
                        Case{Config(12, 6, 96, 100), 4, "num_key_value_heads (6)"},
                        Case{Config(8, 8, 30, 100), 4, "intermediate_size (30)"}}) {
    absl::Status status = CheckTensorParallelSplit(c.config, c.world);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    std::string message(status.message());
    EXPECT_NE(message.find(c.names), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(c.world) + " tensor-parallel ranks"), std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
    EXPECT_EQ(PlanTensorParallelShard(c.config, 0, c.world).status(), status);
  }
}

TEST(TensorParallelPlanTest, RefusesBadRankAndWorld) {
  const ModelConfig config = Config(8, 8, 96, 100);
  EXPECT_EQ(PlanTensorParallelShard(config, 2, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanTensorParallelShard(config, -1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanTensorParallelShard(config, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pagoda
