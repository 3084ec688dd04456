// The worker's host cache of parsed adapters (--max-cpu-loras) through
// LoraAdapterLoader: reads counted by an injected reader over real adapter
// directories on disk.
#include "worker/lora/lora_adapter_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "common/lora_limits.h"
#include "gtest/gtest.h"
#include "worker/lora/lora_adapter_loader.h"

namespace pagoda::worker {
namespace {

namespace fs = std::filesystem;

constexpr LinearShape kShape{.out = 5, .in = 3};

std::array<LinearShape, kNumLoraModules> AllShapes() {
  std::array<LinearShape, kNumLoraModules> shapes;
  shapes.fill(kShape);
  return shapes;
}

// An adapter on q_proj of one layer whose values are `tag`, so a test can
// tell which directory a slot holds.
LoraAdapter TaggedAdapter(float tag) {
  LoraAdapter adapter;
  adapter.config.rank = 2;
  adapter.scale = tag;
  adapter.layers.resize(1);
  adapter.layers[0][static_cast<int>(LoraModule::kQ)] =
      LoraMatrices{2, kShape.in, kShape.out, std::vector<float>(2 * kShape.in, tag),
                   std::vector<float>(kShape.out * 2, tag)};
  return adapter;
}

void WriteFile(const fs::path& path, const std::string& text) {
  // Written aside and renamed over: a new inode, as a tool replacing it makes.
  const fs::path aside = path.string() + ".tmp";
  std::ofstream(aside) << text;
  fs::rename(aside, path);
}

class LoraAdapterCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("lora_cache_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    for (const char* name : {"a", "b", "c"}) MakeAdapterDir(name);
  }
  void TearDown() override { fs::remove_all(root_); }

  void MakeAdapterDir(const std::string& name) {
    fs::create_directories(root_ / name);
    WriteFile(root_ / name / "adapter_config.json", "{\"r\": 2}");
    WriteFile(root_ / name / "adapter_model.safetensors", name);
  }
  std::string Dir(const std::string& name) const { return (root_ / name).string(); }

  // A loader of `slots` slots caching `capacity` adapters, reading through
  // a counter; each directory's adapter is tagged by its name's letter.
  std::unique_ptr<LoraAdapterLoader> MakeLoader(int slots, int capacity) {
    auto lora_slots = std::make_shared<LoraSlots>(slots, 4, 1, AllShapes());
    return std::make_unique<LoraAdapterLoader>(
        ModelConfig{}, TensorParallelShard{}, lora_slots, capacity,
        [this](const std::string& path) -> absl::StatusOr<LoraAdapter> {
          ++reads_[fs::path(path).filename().string()];
          return TaggedAdapter(static_cast<float>(fs::path(path).filename().string()[0]));
        });
  }

  fs::path root_;
  std::map<std::string, int> reads_;
};

TEST_F(LoraAdapterCacheTest, ReloadingAnAdapterReadsItsFilesOnce) {
  auto loader = MakeLoader(2, 2);
  auto first = loader->Load(1, Dir("a"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->cached);
  ASSERT_TRUE(loader->Unload(1).ok());
  auto again = loader->Load(1, Dir("a"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->cached);
  // The same directory through a symlink and a `..` is the same adapter.
  fs::create_directory_symlink(root_ / "a", root_ / "link");
  auto linked = loader->Load(2, (root_ / "link" / ".." / "a").string());
  ASSERT_TRUE(linked.ok()) << linked.status();
  auto via_symlink = loader->Load(2, Dir("link"));
  ASSERT_TRUE(via_symlink.ok()) << via_symlink.status();
  EXPECT_EQ(reads_["a"], 1);
  EXPECT_EQ(reads_["link"], 0);
  EXPECT_TRUE(loader->slots()->Snapshot().loaded(1));
  EXPECT_TRUE(loader->slots()->Snapshot().loaded(2));
  EXPECT_EQ(loader->cached_adapters(), 1);
}

TEST_F(LoraAdapterCacheTest, AReplacedFileIsReadAgain) {
  auto loader = MakeLoader(1, 2);
  ASSERT_TRUE(loader->Load(1, Dir("a")).ok());
  WriteFile(root_ / "a" / "adapter_model.safetensors", "new weights");
  auto reloaded = loader->Load(1, Dir("a"));
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_FALSE(reloaded->cached);
  WriteFile(root_ / "a" / "adapter_config.json", "{\"r\": 2, \"lora_alpha\": 4}");
  ASSERT_TRUE(loader->Load(1, Dir("a")).ok());
  EXPECT_EQ(reads_["a"], 3);
  ASSERT_TRUE(loader->Load(1, Dir("a")).ok());
  EXPECT_EQ(reads_["a"], 3);
}

TEST_F(LoraAdapterCacheTest, TheLeastRecentlyUsedAdapterIsEvictedFirst) {
  auto loader = MakeLoader(1, 2);
  for (const char* name : {"a", "b", "a", "c"}) ASSERT_TRUE(loader->Load(1, Dir(name)).ok());
  // Cached now, most recent first: c, a (b was the least recently used).
  EXPECT_EQ(reads_["a"], 1);
  ASSERT_TRUE(loader->Load(1, Dir("a")).ok());  // Hit: a, c.
  EXPECT_EQ(reads_["a"], 1);
  ASSERT_TRUE(loader->Load(1, Dir("b")).ok());  // Miss: evicts c.
  EXPECT_EQ(reads_["b"], 2);
  ASSERT_TRUE(loader->Load(1, Dir("a")).ok());
  EXPECT_EQ(reads_["a"], 1);
  ASSERT_TRUE(loader->Load(1, Dir("c")).ok());
  EXPECT_EQ(reads_["c"], 2);
  EXPECT_EQ(loader->cached_adapters(), 2);
}

TEST_F(LoraAdapterCacheTest, AMissAfterEvictionReadsTheDiskAndFailsClearly) {
  auto loader = MakeLoader(1, 1);
  ASSERT_TRUE(loader->Load(1, Dir("a")).ok());
  ASSERT_TRUE(loader->Load(1, Dir("b")).ok());  // Evicts a.
  fs::remove_all(root_ / "a");
  auto gone = loader->Load(1, Dir("a"));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  EXPECT_NE(gone.status().message().find(Dir("a")), std::string::npos) << gone.status();
  EXPECT_EQ(reads_["a"], 1);
  // The files, not the cache, are the truth: a cached adapter whose
  // weights were deleted is read (and refused) again, by the real reader.
  auto slots = std::make_shared<LoraSlots>(1, 4, 1, AllShapes());
  LoraAdapterLoader real(ModelConfig{}, TensorParallelShard{}, slots, 1);
  fs::remove(root_ / "b" / "adapter_model.safetensors");
  auto unreadable = real.Load(1, Dir("b"));
  EXPECT_FALSE(unreadable.ok());
  EXPECT_EQ(real.cached_adapters(), 0);
}

TEST(LoraAdapterCacheLimitsTest, CapacityBytesAndBounds) {
  LoraAdapterCache cache(2);
  const LoraFilesIdentity id{};
  for (float tag : {1.f, 2.f, 3.f}) {
    cache.Insert(std::to_string(tag), id, std::make_shared<LoraAdapter>(TaggedAdapter(tag)));
  }
  EXPECT_EQ(cache.size(), 2);
  EXPECT_FALSE(cache.Contains(std::to_string(1.f)));
  EXPECT_EQ(cache.bytes(), 2 * TaggedAdapter(1).bytes());
  LoraFilesIdentity other = id;
  other.weights.inode = 7;
  EXPECT_EQ(cache.Find(std::to_string(2.f), other), nullptr);  // Stale: dropped.
  EXPECT_EQ(cache.size(), 1);
  EXPECT_EQ(cache.bytes(), TaggedAdapter(1).bytes());

  LoraAdapterCache none(0);
  none.Insert("x", id, std::make_shared<LoraAdapter>(TaggedAdapter(1)));
  EXPECT_EQ(none.size(), 0);

  EXPECT_TRUE(CheckLoraLimits(1, 8, kMaxCpuLoras).ok());
  EXPECT_FALSE(CheckLoraLimits(1, 8, -1).ok());
  EXPECT_FALSE(CheckLoraLimits(1, 8, kMaxCpuLoras + 1).ok());
  // 0 caches as many adapters as there are slots.
  LoraAdapterLoader defaulted(ModelConfig{}, TensorParallelShard{},
                              std::make_shared<LoraSlots>(3, 4, 1, AllShapes()), 0);
  EXPECT_EQ(defaulted.cache_capacity(), 3);
}

}  // namespace
}  // namespace pagoda::worker
