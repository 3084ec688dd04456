#include "scheduler/lora/lora_lru.h"

#include "gtest/gtest.h"

namespace pagoda::lora {
namespace {

TEST(LoraLruTest, EvictsTheLeastRecentlyUsedUnpinned) {
  LoraLru lru(3);
  for (int id : {1, 2, 3}) EXPECT_TRUE(lru.Touch(id, {})->empty());
  EXPECT_TRUE(lru.Touch(1, {})->empty());  // 1 is now the most recent.
  EXPECT_EQ(*lru.Touch(4, {}), std::vector<int>{2});
  EXPECT_EQ(lru.Order(), (std::vector<int>{4, 1, 3}));
  EXPECT_EQ(*lru.Touch(5, {3}), std::vector<int>{1});  // 3 is pinned: 1 goes.
  EXPECT_EQ(lru.Order(), (std::vector<int>{5, 4, 3}));
  auto full = lru.Touch(6, {3, 4, 5});
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(lru.Order(), (std::vector<int>{5, 4, 3}));
  lru.Erase(4);
  EXPECT_FALSE(lru.Contains(4));
  EXPECT_TRUE(lru.Touch(6, {3, 5})->empty());
}

}  // namespace
}  // namespace pagoda::lora
