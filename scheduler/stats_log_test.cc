#include "scheduler/stats_log.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pagoda::scheduler {
namespace {

using Lines = std::vector<std::string>;

EngineSnapshot Busy() {
  EngineSnapshot now;
  now.prompt_tokens_total = 100;
  now.generation_tokens_total = 50;
  now.num_running = 3;
  now.num_waiting = 1;
  now.num_gpu_blocks = 10;
  now.free_gpu_blocks = 6;
  now.prefix_cache_queries_total = 80;
  now.prefix_cache_hits_total = 20;
  return now;
}

TEST(StatsLogLinesTest, VllmsLineForTheInterval) {
  EXPECT_EQ(StatsLogLines(EngineSnapshot(), Busy(), 10, false),
            (Lines{"Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: "
                   "5.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 40.0%, "
                   "Prefix cache hit rate: 25.0%"}));
}

// As vLLM's: an idle interval is logged once after activity, then not.
TEST(StatsLogLinesTest, AnIdleServerStaysQuietAfterOneLine) {
  EngineSnapshot idle = Busy();
  idle.num_running = 0;
  idle.num_waiting = 0;
  idle.free_gpu_blocks = 10;
  EXPECT_EQ(StatsLogLines(idle, idle, 10, true),
            (Lines{"Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
                   "0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, "
                   "Prefix cache hit rate: 0.0%"}));
  EXPECT_TRUE(StatsLogLines(idle, idle, 10, false).empty());
}

TEST(StatsLogLinesTest, AnIntervalThatDraftedAddsVllmsSpecDecodingLine) {
  EngineSnapshot before = Busy();
  before.spec_decode.num_drafts = 1;
  before.spec_decode.num_draft_tokens = 3;
  before.spec_decode.num_accepted_tokens = 1;
  before.spec_decode.accepted_per_pos = {1, 0, 0};
  EngineSnapshot now = before;
  now.generation_tokens_total += 20;
  now.spec_decode.num_drafts = 5;
  now.spec_decode.num_draft_tokens = 15;
  now.spec_decode.num_accepted_tokens = 10;
  now.spec_decode.accepted_per_pos = {5, 3, 2};
  const Lines lines = StatsLogLines(before, now, 10, false);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1],
            "SpecDecoding metrics: Mean acceptance length: 3.25, Accepted throughput: 0.90 "
            "tokens/s, Drafted throughput: 1.20 tokens/s, Accepted: 9 tokens, Drafted: 12 tokens, "
            "Per-position acceptance rate: 1.000, 0.750, 0.500, Avg Draft acceptance rate: 75.0%");
  // No draft in the interval: no such line.
  EXPECT_EQ(StatsLogLines(now, now, 10, true).size(), 1u);
}

}  // namespace
}  // namespace pagoda::scheduler
