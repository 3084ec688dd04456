#include "common/eagle_head_positions.h"

#include "gtest/gtest.h"

namespace pagoda {
namespace {

// vLLM's cases: a smaller value is raised to the target's, an equal or
// larger one is kept (never lowered); nothing else in the config moves.
TEST(EagleHeadPositionsTest, RaisesOnlyAHeadBelowTheTargetsPositions) {
  ModelConfig head;
  head.max_position_embeddings = 2048;
  head.rope_theta = 500000.0;
  head.rope_scaling.type = RopeScaling::Type::kLlama3;
  head.rope_scaling.original_max_position_embeddings = 8192;
  ModelConfig raised = head;
  EXPECT_TRUE(RaiseEagleHeadPositions(8192, &raised));
  EXPECT_EQ(raised.max_position_embeddings, 8192);
  EXPECT_EQ(raised.rope_theta, head.rope_theta);
  EXPECT_EQ(raised.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_EQ(raised.rope_scaling.original_max_position_embeddings, 8192);
  for (int target : {2048, 1024}) {
    ModelConfig kept = head;
    EXPECT_FALSE(RaiseEagleHeadPositions(target, &kept)) << target;
    EXPECT_EQ(kept.max_position_embeddings, 2048) << target;
  }
}

}  // namespace
}  // namespace pagoda
