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

// vLLM's rule (vocab_parallel_embedding.py): pad_vocab_size rounds up to a
// multiple of 64, divide() splits the padded size exactly, and each rank owns
// [rank * per, (rank + 1) * per) clipped to the real vocabulary.
TEST(TensorParallelPlanTest, VocabularySplitMatchesVllmPaddingAndRanges) {
  struct Case {
    int64_t vocab;
    int world;
    int64_t padded;
    std::vector<IndexRange> ranges;
  };
  const std::vector<Case> cases = {
      {75, 2, 128, {{0, 64}, {64, 75}}},
      {75, 4, 128, {{0, 32}, {32, 64}, {64, 75}, {75, 75}}},
      {32000, 1, 32000, {{0, 32000}}},
      {32000, 2, 32000, {{0, 16000}, {16000, 32000}}},
      {32000, 4, 32000, {{0, 8000}, {8000, 16000}, {16000, 24000}, {24000, 32000}}},
      {32000,
       8,
       32000,
       {{0, 4000},
        {4000, 8000},
        {8000, 12000},
        {12000, 16000},
        {16000, 20000},
        {20000, 24000},
        {24000, 28000},
        {28000, 32000}}},
      {128256, 1, 128256, {{0, 128256}}},
      {128256, 2, 128256, {{0, 64128}, {64128, 128256}}},
      {128256, 3, 128256, {{0, 42752}, {42752, 85504}, {85504, 128256}}},
      {128256, 4, 128256, {{0, 32064}, {32064, 64128}, {64128, 96192}, {96192, 128256}}},
      {128256,
       8,
       128256,
       {{0, 16032},
        {16032, 32064},
        {32064, 48096},
        {48096, 64128},
        {64128, 80160},
        {80160, 96192},
        {96192, 112224},
        {112224, 128256}}},
      {151936, 1, 151936, {{0, 151936}}},
      {151936, 2, 151936, {{0, 75968}, {75968, 151936}}},
      {151936, 4, 151936, {{0, 37984}, {37984, 75968}, {75968, 113952}, {113952, 151936}}},
      {151936,
       8,
       151936,
       {{0, 18992},
        {18992, 37984},
        {37984, 56976},
        {56976, 75968},
        {75968, 94960},
        {94960, 113952},
        {113952, 132944},
        {132944, 151936}}},
      {50257, 3, 50304, {{0, 16768}, {16768, 33536}, {33536, 50257}}},
      {50257,
       8,
       50304,
       {{0, 6288},
        {6288, 12576},
        {12576, 18864},
        {18864, 25152},
        {25152, 31440},
        {31440, 37728},
        {37728, 44016},
        {44016, 50257}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("vocab " + std::to_string(c.vocab) + " world " + std::to_string(c.world));
    EXPECT_EQ(PaddedVocabSize(c.vocab), c.padded);
    EXPECT_TRUE(CheckVocabParallelSplit(c.vocab, c.world).ok());
    EXPECT_EQ(VocabParallelRowsPerRank(c.vocab, c.world), c.padded / c.world);
    ASSERT_EQ(static_cast<int>(c.ranges.size()), c.world);
    for (int rank = 0; rank < c.world; ++rank) {
      EXPECT_EQ(VocabParallelRange(c.vocab, rank, c.world), c.ranges[rank]) << "rank " << rank;
    }
  }
}

// Where the padded size does not divide, vLLM's divide() asserts; we refuse
// at load in one line naming the sizes (the model's config, through
// CheckTensorParallelSplit, and any split head, e.g. an EAGLE-3 draft
// vocabulary, through VocabParallelHead::Load).
TEST(TensorParallelPlanTest, VocabularyTheRanksCannotSplitEvenlyIsRefused) {
  struct Case {
    int64_t vocab;
    int world;
    std::string sizes;
  };
  for (const Case& c : {Case{75, 3, "vocab_size 75 (padded to 128"},
                        Case{32000, 3, "vocab_size 32000 (padded to 32000"},
                        Case{151936, 3, "vocab_size 151936 (padded to 151936"},
                        Case{32000, 6, "vocab_size 32000 (padded to 32000"},
                        Case{128256, 5, "vocab_size 128256 (padded to 128256"}}) {
    absl::Status status = CheckVocabParallelSplit(c.vocab, c.world);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    std::string message(status.message());
    EXPECT_NE(message.find(c.sizes), std::string::npos) << message;
    EXPECT_NE(message.find("not divisible by " + std::to_string(c.world)), std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  // Through the model's split: 12 heads and 96 channels split over 3, the
  // vocabulary does not.
  const ModelConfig config = Config(12, 12, 96, 32000);
  absl::Status status = CheckTensorParallelSplit(config, 3);
  EXPECT_EQ(status, CheckVocabParallelSplit(32000, 3));
  EXPECT_EQ(PlanTensorParallelShard(config, 0, 3).status(), status);
  EXPECT_TRUE(CheckTensorParallelSplit(Config(12, 12, 96, 128256), 3).ok());
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
