#include "scheduler/engine/beam_search.h"

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler {
namespace {

GeneratedToken WithTop(std::vector<std::pair<int32_t, float>> top) {
  GeneratedToken token{top[0].first, top[0].second, {}};
  for (const auto& [id, logprob] : top) token.top.push_back(TopLogprob{id, logprob});
  return token;
}

class BeamSearchTest : public ::testing::Test {
 protected:
  BeamSearchTest() : scheduler_(Config()), processor_({/*eos=*/2}, 64, &scheduler_) {
    SamplingOptions sampling;
    sampling.use_beam_search = true;
    sampling.best_of = sampling.n = 2;
    StoppingOptions stopping;
    stopping.max_tokens = 3;
    std::vector<int32_t> prompt(6);
    std::iota(prompt.begin(), prompt.end(), 100);
    auto group = std::make_unique<SequenceGroup>("beam", std::move(prompt), 1, sampling, stopping,
                                                 absl::UnixEpoch());
    group_ = group.get();
    scheduler_.AddSequenceGroup(std::move(group));
  }

  static SchedulerConfig Config() {
    SchedulerConfig config;
    config.block_size = 4;
    config.num_gpu_blocks = 16;
    config.watermark = 0;
    return config;
  }

  // Schedules a step and feeds each scheduled beam the given candidates.
  SchedulerOutput Step(const std::vector<GeneratedToken>& per_beam) {
    SchedulerOutput output = scheduler_.Schedule();
    EXPECT_EQ(output.scheduled.size(), per_beam.size());
    deltas_ = processor_.Process(output, per_beam);
    scheduler_.CommitComputedBlocks(output);
    finished_ = scheduler_.FreeFinished();
    return output;
  }

  Scheduler scheduler_;
  OutputProcessor processor_;
  SequenceGroup* group_;
  std::vector<RequestDelta> deltas_;
  std::vector<std::unique_ptr<SequenceGroup>> finished_;
};

TEST_F(BeamSearchTest, BeamsForkShareBlocksCopyOnWriteAndPrunedBeamsFreeTheirs) {
  const BlockManager& blocks = scheduler_.block_manager();
  Step({WithTop({{10, -0.1f}, {11, -0.2f}, {12, -0.3f}, {13, -0.4f}})});
  ASSERT_EQ(group_->seqs().size(), 2u);
  Sequence& first = *group_->seqs()[0];
  Sequence& second = *group_->seqs()[1];
  EXPECT_EQ(first.last_token(), 10);
  EXPECT_EQ(second.last_token(), 11);
  // The second beam forked: same blocks, nothing copied yet.
  EXPECT_EQ(blocks.GetBlockTable(first.seq_id()), blocks.GetBlockTable(second.seq_id()));
  EXPECT_TRUE(deltas_.empty());  // Beam search answers at the end.

  // Both write position 6 into the shared partial block: one copy on write.
  SchedulerOutput decode = Step({WithTop({{20, -5.0f}, {21, -6.0f}, {22, -7.0f}, {23, -8.0f}}),
                                 WithTop({{30, -0.1f}, {31, -0.2f}, {32, -0.3f}, {33, -0.4f}})});
  EXPECT_EQ(decode.blocks_to_copy.size(), 1u);
  // Both survivors extend the second beam: the first is pruned and freed.
  EXPECT_EQ(first.status(), SequenceStatus::kFinishedPruned);
  EXPECT_EQ(blocks.FindBlockTable(first.seq_id()), nullptr);
  ASSERT_EQ(group_->seqs().size(), 3u);
  EXPECT_EQ(second.last_token(), 30);
  EXPECT_EQ(group_->seqs()[2]->last_token(), 31);

  // max_tokens = 3: the last step finishes both; best score first.
  Step({WithTop({{40, -1.0f}, {41, -1.1f}, {42, -1.2f}, {43, -1.3f}}),
        WithTop({{50, -0.5f}, {51, -0.6f}, {52, -0.7f}, {53, -0.8f}})});
  ASSERT_EQ(deltas_.size(), 1u);
  ASSERT_TRUE(deltas_[0].finished);
  ASSERT_EQ(deltas_[0].seqs.size(), 2u);
  std::vector<int32_t> best;
  for (const GeneratedToken& token : deltas_[0].seqs[0].new_tokens) best.push_back(token.token_id);
  EXPECT_EQ(best, std::vector<int32_t>({11, 31, 50}));  // -0.2 - 0.2 - 0.5 = -0.9
  EXPECT_EQ(deltas_[0].seqs[1].index, 1);
  ASSERT_EQ(finished_.size(), 1u);
  EXPECT_EQ(blocks.num_free_gpu_blocks(), 16);
}

TEST_F(BeamSearchTest, EosEndsAHypothesisAndTheSearchStopsWhenNoBeamCanWin) {
  Step({WithTop({{2, -0.1f}, {11, -0.2f}, {12, -0.3f}, {13, -0.4f}})});
  // EOS at once: a finished hypothesis with no blocks; two beams continue.
  EXPECT_EQ(group_->SeqsWithStatus(SequenceStatus::kFinishedStopped).size(), 1u);
  EXPECT_EQ(group_->SeqsWithStatus(SequenceStatus::kRunning).size(), 2u);
  // The best running beam (-0.2 + -3.0 over 8 tokens) cannot beat the worst
  // of two finished ones (-0.1 over 6 tokens; the second below): stop.
  Step({WithTop({{2, -0.5f}, {21, -3.0f}, {22, -3.1f}, {23, -3.2f}}),
        WithTop({{30, -3.0f}, {31, -3.1f}, {32, -3.2f}, {33, -3.3f}})});
  ASSERT_EQ(deltas_.size(), 1u);
  EXPECT_TRUE(deltas_[0].finished);
  ASSERT_EQ(deltas_[0].seqs.size(), 2u);
  EXPECT_EQ(deltas_[0].seqs[0].new_tokens.size(), 1u);  // [EOS], score -0.1 / 6.
  EXPECT_EQ(deltas_[0].seqs[1].new_tokens.size(), 2u);  // [11, EOS], score -0.7 / 7.
  EXPECT_EQ(scheduler_.block_manager().num_free_gpu_blocks(), 16);
}

TEST_F(BeamSearchTest, MaskedCandidatesAreNoExtensions) {
  // A constrained beam's top list ends in -inf tokens when its grammar
  // allows fewer than 2k: only the one allowed token extends it, so one
  // beam runs on, not two.
  Step({WithTop({{10, 0.0f}, {0, -INFINITY}, {1, -INFINITY}, {3, -INFINITY}})});
  ASSERT_EQ(group_->seqs().size(), 1u);
  EXPECT_EQ(group_->seqs()[0]->last_token(), 10);
  EXPECT_EQ(group_->seqs()[0]->cumulative_logprob(), 0.0);
  // Where only EOS is allowed (the grammar's end), the beam finishes.
  Step({WithTop({{2, 0.0f}, {0, -INFINITY}, {1, -INFINITY}, {3, -INFINITY}})});
  ASSERT_EQ(deltas_.size(), 1u);
  EXPECT_TRUE(deltas_[0].finished);
  ASSERT_EQ(deltas_[0].seqs.size(), 1u);  // Fewer texts than the width: fewer answers.
  EXPECT_EQ(deltas_[0].seqs[0].status, SequenceStatus::kFinishedStopped);
  EXPECT_EQ(scheduler_.block_manager().num_free_gpu_blocks(), 16);
}

}  // namespace
}  // namespace pagoda::scheduler
