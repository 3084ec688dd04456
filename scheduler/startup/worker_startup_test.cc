// The LoadModel request the server sends every worker, for what speculative
// decoding sizes at load: k (num_speculative_tokens) for every method, so a
// CUDA worker reserves a verify step's k + 1 logits rows a sequence before
// it captures graphs; the draft's directory, kind and tensor-parallel size
// for the methods that have a draft.
#include "scheduler/startup/worker_startup.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

ServerConfig Served() {
  ServerConfig config;
  config.model.model_dir = "model";
  return config;
}

ServerConfig WithSpeculation(SpeculativeMethod method, int k) {
  ServerConfig config = Served();
  config.workers.tensor_parallel_size = 2;
  SpeculativeConfig speculative;
  speculative.method = method;
  speculative.num_speculative_tokens = k;
  if (method != SpeculativeMethod::kNgram) speculative.model = "draft";
  config.speculative = speculative;
  return config;
}

TEST(MakeLoadModelRequestTest, WithoutSpeculationNoVerifyRowsAndNoDraft) {
  const auto load = MakeLoadModelRequest(Served());
  EXPECT_EQ(load.num_speculative_tokens(), 0);
  EXPECT_TRUE(load.draft_model_dir().empty());
}

TEST(MakeLoadModelRequestTest, NgramSendsKAndNoDraft) {
  const auto load = MakeLoadModelRequest(WithSpeculation(SpeculativeMethod::kNgram, 3));
  EXPECT_EQ(load.num_speculative_tokens(), 3);
  EXPECT_TRUE(load.draft_model_dir().empty());
  EXPECT_FALSE(load.draft_is_eagle_head());
  EXPECT_FALSE(load.draft_is_eagle3_head());
}

TEST(MakeLoadModelRequestTest, EveryDraftMethodSendsKAndItsDraft) {
  const std::string absolute_draft = std::filesystem::absolute("draft").string();
  for (const SpeculativeMethod method :
       {SpeculativeMethod::kDraftModel, SpeculativeMethod::kEagle, SpeculativeMethod::kEagle3}) {
    const auto load = MakeLoadModelRequest(WithSpeculation(method, 5));
    EXPECT_EQ(load.num_speculative_tokens(), 5);
    EXPECT_EQ(load.draft_model_dir(), absolute_draft);
    EXPECT_EQ(load.draft_is_eagle_head(), method == SpeculativeMethod::kEagle);
    EXPECT_EQ(load.draft_is_eagle3_head(), method == SpeculativeMethod::kEagle3);
    // Unset: the target's size.
    EXPECT_EQ(load.draft_tensor_parallel_size(), 2);
  }
}

}  // namespace
}  // namespace pagoda::scheduler
