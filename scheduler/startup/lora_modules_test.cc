// --lora-modules at start: good adapters registered with canonical paths;
// a rank above --max-lora-rank, a missing directory, or a duplicate name
// stops start-up with one line naming the adapter, registering nothing.

#include "scheduler/startup/lora_modules.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/tiny_model.h"

namespace pagoda::scheduler {
namespace {

namespace fs = std::filesystem;

TEST(LoraModulesTest, RegistersGoodAdaptersAndRefusesABadOneByName) {
  const std::string dir = ::pagoda::testing::TempPath("lora_modules_test");
  fs::create_directories(dir);
  const std::string base = dir + "/base";
  ASSERT_TRUE(
      ::pagoda::testing::WriteTinyModel(base,
                                        "--vocab-size 40 --hidden-size 24 --intermediate-size 36 "
                                        "--num-layers 2 --num-heads 4 --num-kv-heads 2 --dtype f32")
          .ok());
  for (const auto& [name, rank] : {std::pair<std::string, int>{"r8", 8}, {"r20", 20}}) {
    const std::string command = absl::StrCat(
        ::pagoda::testing::PythonBinary(), " tests/reference/lora_reference.py make", " --base ",
        base, " --out ", dir, "/", name, " --rank ", rank, " --alpha 8 --targets q_proj,v_proj");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  absl::StatusOr<ModelConfig> model = LoadModelConfig(base);
  ASSERT_TRUE(model.ok()) << model.status();
  lora::LoraOptions options;
  options.enable_lora = true;
  options.max_lora_rank = 16;
  // Through a relative path with "..": registered canonical.
  options.modules = {{"sql", dir + "/base/../r8", ""}};
  lora::LoraRegistry registry;
  ASSERT_TRUE(RegisterLoraModules(options, *model, registry).ok());
  absl::StatusOr<lora::LoraEntry> sql = registry.Find("sql");
  ASSERT_TRUE(sql.ok());
  EXPECT_EQ(sql->spec.path, fs::canonical(dir + "/r8").string());

  const auto refusal = [&](lora::LoraModuleSpec spec) {
    lora::LoraOptions bad = options;
    bad.modules = {{"ok", dir + "/r8", ""}, spec};
    lora::LoraRegistry fresh;
    absl::Status status = RegisterLoraModules(bad, *model, fresh);
    EXPECT_TRUE(fresh.List().empty()) << "registered before the refusal";
    return status;
  };
  absl::Status too_big = refusal({"big", dir + "/r20", ""});
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.message().find("--lora-modules: adapter \"big\""), std::string::npos)
      << too_big;
  EXPECT_NE(too_big.message().find("20"), std::string::npos) << too_big;
  EXPECT_EQ(too_big.message().find('\n'), std::string::npos);
  absl::Status missing = refusal({"gone", dir + "/nowhere", ""});
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("\"gone\""), std::string::npos) << missing;
  EXPECT_EQ(refusal({"ok", dir + "/r8", ""}).code(), absl::StatusCode::kAlreadyExists);
  // Without --enable-lora nothing is read.
  options.enable_lora = false;
  options.modules = {{"gone", dir + "/nowhere", ""}};
  EXPECT_TRUE(RegisterLoraModules(options, *model, registry).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::scheduler
