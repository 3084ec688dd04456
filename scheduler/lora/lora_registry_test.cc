#include "scheduler/lora/lora_registry.h"

#include "gtest/gtest.h"

namespace pagoda::lora {
namespace {

TEST(LoraRegistryTest, AddsListsAndRefusesDuplicates) {
  LoraRegistry registry;
  EXPECT_EQ(*registry.Add({"b", "/b", ""}), 1);
  EXPECT_EQ(*registry.Add({"a", "/a", "base"}), 2);
  auto again = registry.Add({"a", "/other", ""});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  const std::vector<LoraEntry> entries = registry.List();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].spec.name, "b");
  EXPECT_EQ(entries[1].spec.base_model_name, "base");
  EXPECT_EQ(registry.Add({"bad name", "/x", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LoraRegistryTest, UnloadIsRefusedWhileRequestsUseIt) {
  LoraRegistry registry;
  ASSERT_TRUE(registry.Add({"a", "/a", ""}).ok());
  const int id = *registry.Acquire("a");
  ASSERT_TRUE(registry.Acquire("a").ok());
  auto removed = registry.Remove("a");
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(removed.status().message().find("in use by 2 request(s)"), std::string::npos);
  registry.Release(id);
  EXPECT_EQ(registry.Remove("a").status().code(), absl::StatusCode::kFailedPrecondition);
  registry.Release(id);
  EXPECT_EQ(*registry.Remove("a"), id);
  // Gone: requests for it are NOT_FOUND (404), and a reload gets a new id.
  EXPECT_EQ(registry.Acquire("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Remove("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*registry.Add({"a", "/a", ""}), id + 1);
}

TEST(LoraRegistryTest, FindsAnAdapterByItsIdUntilRemoved) {
  LoraRegistry registry;
  ASSERT_TRUE(registry.Add({"a", "/adapters/a", ""}).ok());
  const int b = *registry.Add({"b", "/adapters/b", ""});
  absl::StatusOr<LoraEntry> found = registry.FindById(b);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->spec.name, "b");
  EXPECT_EQ(found->spec.path, "/adapters/b");
  EXPECT_EQ(registry.FindById(0).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry.Remove("b").ok());
  EXPECT_EQ(registry.FindById(b).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pagoda::lora
