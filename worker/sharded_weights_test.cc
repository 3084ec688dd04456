// A rank's slices of the checkpoint: the ranges each weight is cut at, the
// rank's own head and channel counts, the bytes read, and pages let go.

#include "worker/sharded_weights.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tensor_slice.h"
#include "gtest/gtest.h"

namespace pagoda::worker {
namespace {

ModelConfig Config(int heads, int kv_heads, int head_dim, int inter) {
  ModelConfig config;
  config.hidden_size = heads * head_dim;
  config.num_attention_heads = heads;
  config.num_key_value_heads = kv_heads;
  config.head_dim = head_dim;
  config.intermediate_size = inter;
  config.vocab_size = 100;
  return config;
}

void ExpectSlice(const WeightSlice& slice, WeightSlice::Axis axis, int64_t begin, int64_t end) {
  EXPECT_EQ(slice.axis, axis);
  EXPECT_EQ(slice.begin, begin);
  EXPECT_EQ(slice.end, end);
}

TEST(PlanLayerSlicesTest, MegatronRangesPerRank) {
  const ModelConfig config = Config(8, 4, 16, 96);
  auto shard = PlanTensorParallelShard(config, 1, 2);
  ASSERT_TRUE(shard.ok()) << shard.status();
  const LayerSlices slices = PlanLayerSlices(config, *shard);
  ExpectSlice(slices.q, WeightSlice::Axis::kRows, 4 * 16, 8 * 16);
  ExpectSlice(slices.kv, WeightSlice::Axis::kRows, 2 * 16, 4 * 16);
  ExpectSlice(slices.o, WeightSlice::Axis::kColumns, 4 * 16, 8 * 16);
  ExpectSlice(slices.gate_up, WeightSlice::Axis::kRows, 48, 96);
  ExpectSlice(slices.down, WeightSlice::Axis::kColumns, 48, 96);
  const ModelConfig local = RankLocalConfig(config, *shard);
  EXPECT_EQ(local.num_attention_heads, 4);
  EXPECT_EQ(local.num_key_value_heads, 2);
  EXPECT_EQ(local.intermediate_size, 48);
  EXPECT_EQ(local.hidden_size, config.hidden_size);
  EXPECT_EQ(local.head_dim, 16);
  EXPECT_EQ(local.vocab_size, 100);
}

TEST(PlanLayerSlicesTest, FewerKvHeadsThanRanksCopiesTheOneTheQueriesRead) {
  const ModelConfig config = Config(8, 2, 16, 64);
  for (int rank = 0; rank < 4; ++rank) {
    auto shard = PlanTensorParallelShard(config, rank, 4);
    ASSERT_TRUE(shard.ok()) << shard.status();
    const LayerSlices slices = PlanLayerSlices(config, *shard);
    // Ranks 0, 1 hold query heads 0..3, which read KV head 0; ranks 2, 3 KV head 1.
    ExpectSlice(slices.kv, WeightSlice::Axis::kRows, (rank / 2) * 16, (rank / 2 + 1) * 16);
    ExpectSlice(slices.q, WeightSlice::Axis::kRows, rank * 2 * 16, (rank + 1) * 2 * 16);
    EXPECT_EQ(RankLocalConfig(config, *shard).num_key_value_heads, 1);
  }
}

// A one-tensor safetensors file written by hand: [4, 6] f32 holding i.
class ReadWeightSliceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/pagoda_slices_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    const std::string header = R"({"w":{"dtype":"F32","shape":[4,6],"data_offsets":[0,96]}})";
    std::ofstream file(dir_ + "/model.safetensors", std::ios::binary);
    const uint64_t size = header.size();
    file.write(reinterpret_cast<const char*>(&size), 8);
    file << header;
    for (int i = 0; i < 24; ++i) {
      const float value = static_cast<float>(i);
      file.write(reinterpret_cast<const char*>(&value), 4);
    }
    file.close();
    auto store = WeightStore::Open(dir_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::vector<float> Values(const HostWeight& weight) {
    std::vector<float> values(weight.nbytes / 4);
    std::memcpy(values.data(), weight.data, weight.nbytes);
    return values;
  }

  std::string dir_;
  std::unique_ptr<WeightStore> store_;
};

TEST_F(ReadWeightSliceTest, RowsAreViewsColumnsAreDenseCopies) {
  auto rows = ReadWeightSlice(*store_, "w", {4, 6}, WeightSlice::Rows(1, 3));
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(rows->owned.empty());
  EXPECT_EQ(rows->shape, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(Values(*rows), (std::vector<float>{6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}));

  auto columns = ReadWeightSlice(*store_, "w", {4, 6}, WeightSlice::Columns(2, 4));
  ASSERT_TRUE(columns.ok()) << columns.status();
  EXPECT_FALSE(columns->owned.empty());
  EXPECT_EQ(columns->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(Values(*columns), (std::vector<float>{2, 3, 8, 9, 14, 15, 20, 21}));

  // All columns (one rank): a view, not a copy.
  auto all = ReadWeightSlice(*store_, "w", {4, 6}, WeightSlice::Columns(0, 6));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->owned.empty());
  EXPECT_EQ(Values(*all).size(), 24u);
  auto whole = ReadWeightSlice(*store_, "w", {4, 6}, WeightSlice::Whole());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(Values(*whole)[23], 23.0f);

  // Released pages read the same afterwards (faulted in again).
  ReleaseMappedPages(whole->data, whole->nbytes);
  EXPECT_EQ(Values(*whole)[5], 5.0f);
}

TEST_F(ReadWeightSliceTest, WrongShapesRangesAndNamesAreErrors) {
  EXPECT_EQ(ReadWeightSlice(*store_, "w", {6, 4}, WeightSlice::Whole()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadWeightSlice(*store_, "w", {4, 6}, WeightSlice::Rows(3, 5)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadWeightSlice(*store_, "w", {4, 6}, WeightSlice::Columns(4, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadWeightSlice(*store_, "missing", {4, 6}, WeightSlice::Whole()).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pagoda::worker
