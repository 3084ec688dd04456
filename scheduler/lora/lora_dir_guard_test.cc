#include "scheduler/lora/lora_dir_guard.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace pagoda::lora {
namespace {

namespace fs = std::filesystem;

class LoraDirGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/lora_dir_guard_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = fs::canonical(pattern);
    dir_ = root_ / "adapters";
    fs::create_directories(dir_ / "sql");
    fs::create_directories(root_ / "secret");
    fs::create_directory_symlink(root_ / "secret", dir_ / "escape");
    fs::create_directory_symlink(dir_ / "sql", dir_ / "alias");
    fs::create_directory_symlink(dir_, root_ / "dir_link");
  }
  void TearDown() override { fs::remove_all(root_); }

  absl::StatusCode Code(const std::string& lora_dir, const std::string& path) {
    return ResolveUnderLoraDir(lora_dir, path).status().code();
  }

  fs::path root_, dir_;
};

TEST_F(LoraDirGuardTest, AcceptsPathsThatResolveInside) {
  auto resolved = ResolveUnderLoraDir(dir_.string(), (dir_ / "sql").string());
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(*resolved, (dir_ / "sql").string());
  EXPECT_EQ(*ResolveUnderLoraDir(dir_.string(), "sql"), (dir_ / "sql").string());
  EXPECT_EQ(*ResolveUnderLoraDir(dir_.string(), "alias"), (dir_ / "sql").string());
  EXPECT_EQ(*ResolveUnderLoraDir(dir_.string(), "sql/../sql/"), (dir_ / "sql").string());
  // --lora-dir given through a symlink resolves too.
  EXPECT_EQ(*ResolveUnderLoraDir((root_ / "dir_link").string(), "sql"), (dir_ / "sql").string());
}

TEST_F(LoraDirGuardTest, RefusesPathsThatResolveOutside) {
  using absl::StatusCode;
  EXPECT_EQ(Code(dir_.string(), "../secret"), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(dir_.string(), (root_ / "secret").string()), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(dir_.string(), "escape"), StatusCode::kPermissionDenied);  // A symlink out.
  EXPECT_EQ(Code(dir_.string(), "sql/../../secret"), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(dir_.string(), "/etc"), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(dir_.string(), "."), StatusCode::kPermissionDenied);  // The directory itself.
  EXPECT_EQ(Code(dir_.string(), ""), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(dir_.string(), std::string("sql\0x", 5)), StatusCode::kPermissionDenied);
  // A sibling whose name starts with the directory's name is outside.
  fs::create_directories(root_ / "adapters2");
  EXPECT_EQ(Code(dir_.string(), (root_ / "adapters2").string()), StatusCode::kPermissionDenied);
  // Without --lora-dir no runtime load is allowed.
  EXPECT_EQ(Code("", (dir_ / "sql").string()), StatusCode::kPermissionDenied);
  // Outside paths are denied whether or not they exist; inside ones that
  // do not exist are NOT_FOUND.
  EXPECT_EQ(Code(dir_.string(), "../nothing"), StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(dir_.string(), "nothing"), StatusCode::kNotFound);
}

}  // namespace
}  // namespace pagoda::lora
