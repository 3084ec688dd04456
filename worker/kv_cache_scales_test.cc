// The FP8 KV cache's per-layer scales as vLLM reads them from checkpoints,
// and each bad scale refused naming its tensor.

#include "worker/kv_cache_scales.h"

#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"

namespace pagoda::worker {
namespace {

using testing::F16Bytes;
using testing::F32Bytes;
using testing::NamedTensor;

class KvCacheScalesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("pagoda_kv_cache_scales"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The scales of layer 1 of a checkpoint holding `tensors` (and a layer-0
  // k_scale that layer 1 must not pick up).
  absl::StatusOr<KvCacheScales> Read(std::vector<NamedTensor> tensors) {
    tensors.push_back({"model.layers.0.self_attn.k_scale", DType::kF32, {}, F32Bytes({9.0f})});
    const absl::Status written = testing::WriteSafetensors(dir_ + "/model.safetensors", tensors);
    EXPECT_TRUE(written.ok()) << written;
    absl::StatusOr<std::unique_ptr<WeightStore>> store = WeightStore::Open(dir_);
    EXPECT_TRUE(store.ok()) << store.status();
    if (!store.ok()) return store.status();
    return ReadKvCacheScales(**store, 1);
  }

  std::string dir_;
};

constexpr char kK[] = "model.layers.1.self_attn.k_scale";
constexpr char kV[] = "model.layers.1.self_attn.v_scale";

TEST_F(KvCacheScalesTest, ReadsEachNameVllmLoads) {
  auto none = Read({});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->k, 1.0f);
  EXPECT_EQ(none->v, 1.0f);

  auto pair =
      Read({{kK, DType::kF32, {}, F32Bytes({0.25f})}, {kV, DType::kF16, {1}, F16Bytes({0.5f})}});
  ASSERT_TRUE(pair.ok()) << pair.status();
  EXPECT_EQ(pair->k, 0.25f);
  EXPECT_EQ(pair->v, 0.5f);

  // Only one of the pair: it serves both, as vLLM duplicates it.
  auto k_only = Read({{kK, DType::kF32, {1}, F32Bytes({0.125f})}});
  ASSERT_TRUE(k_only.ok()) << k_only.status();
  EXPECT_EQ(k_only->v, 0.125f);

  auto outputs =
      Read({{"model.layers.1.self_attn.k_proj.output_scale", DType::kF32, {1}, F32Bytes({2.0f})},
            {"model.layers.1.self_attn.v_proj.output_scale", DType::kF32, {1}, F32Bytes({3.0f})}});
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_EQ(outputs->k, 2.0f);
  EXPECT_EQ(outputs->v, 3.0f);

  auto kv = Read({{"model.layers.1.self_attn.kv_scale", DType::kF32, {}, F32Bytes({0.75f})}});
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->k, 0.75f);
  EXPECT_EQ(kv->v, 0.75f);
}

TEST_F(KvCacheScalesTest, RefusesABadScaleNamingTheTensor) {
  const std::vector<std::pair<NamedTensor, std::string>> cases = {
      {{kK, DType::kF32, {}, F32Bytes({0.0f})},
       "KV cache scale \"model.layers.1.self_attn.k_scale\" is 0, expected a finite positive "
       "number"},
      {{kV, DType::kF32, {}, F32Bytes({-2.0f})},
       "KV cache scale \"model.layers.1.self_attn.v_scale\" is -2, expected a finite positive "
       "number"},
      {{kK, DType::kF32, {}, F32Bytes({std::numeric_limits<float>::quiet_NaN()})},
       "KV cache scale \"model.layers.1.self_attn.k_scale\" is nan, expected a finite positive "
       "number"},
      {{kK, DType::kF32, {2}, F32Bytes({1.0f, 1.0f})},
       "KV cache scale \"model.layers.1.self_attn.k_scale\" has shape [2], expected [] or [1]"},
      {{kV, DType::kF32, {1, 1}, F32Bytes({1.0f})},
       "KV cache scale \"model.layers.1.self_attn.v_scale\" has shape [1, 1], expected [] or "
       "[1]"},
      {{kK, DType::kFp8E4M3, {1}, std::string(1, '\x38')},
       "KV cache scale \"model.layers.1.self_attn.k_scale\" is F8_E4M3, expected F32, F16 or "
       "BF16"},
  };
  for (const auto& [tensor, message] : cases) {
    auto scales = Read({tensor});
    ASSERT_FALSE(scales.ok()) << message;
    EXPECT_EQ(scales.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(scales.status().message(), message);
  }
}

}  // namespace
}  // namespace pagoda::worker
