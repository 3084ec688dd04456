#include "scheduler/engine/step_plan_bound.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/sampling_limits.h"
#include "gtest/gtest.h"
#include "pagoda/worker/v1/worker.pb.h"

namespace pagoda::scheduler {
namespace {

namespace wv1 = ::pagoda::worker::v1;

constexpr int32_t kMaxInt32 = std::numeric_limits<int32_t>::max();

// A row's sampling options with every list at its per-request bound and
// every value at its widest encoding: what MaxStepPlanBytes must cover.
void FillWorstSampling(const StepPlanLimits& limits, int distinct_prompt,
                       wv1::SamplingOptions* options) {
  const int32_t last_id = limits.vocab_size - 1;
  options->set_temperature(1.5f);
  options->set_top_k(kMaxInt32);
  options->set_top_p(0.5f);
  options->set_seed(std::numeric_limits<uint64_t>::max());
  options->set_num_logprobs(kMaxTopLogprobs);
  options->set_presence_penalty(1.0f);
  options->set_frequency_penalty(1.0f);
  options->set_repetition_penalty(1.5f);
  options->set_min_p(0.5f);
  options->set_processed_logprobs(true);
  for (int i = 0; i < kMaxLogitBiasEntries; ++i) {
    options->add_logit_bias_token_ids(last_id);
    options->add_logit_bias_values(-100.0f);
  }
  for (int i = 0; i < limits.vocab_size; ++i) options->add_allowed_token_ids(last_id);
  // Bad words (two tokenizations each), stop ids (any int32: -1 is the
  // widest varint) and EOS.
  const int banned = 2 * kMaxBadWords + kMaxStopTokenIds + limits.num_eos_token_ids;
  for (int i = 0; i < banned; ++i) options->add_banned_token_ids(-1);
  for (int i = 0; i < distinct_prompt; ++i) options->add_prompt_token_ids(last_id);
  for (int i = distinct_prompt; i < limits.max_model_len; ++i) {
    options->add_output_token_ids(last_id);
    options->add_output_token_counts(limits.max_model_len);
  }
  options->set_token_mask(std::string(4 * ((limits.vocab_size + 31) / 32), '\xff'));
}

// The largest plan the limits allow: every row sampling with the worst
// options, the step's tokens and prompt logprob targets spread over the
// rows, full block tables and a move for every block they hold.
wv1::StepPlan WorstStepPlan(const StepPlanLimits& limits) {
  wv1::StepPlan plan;
  plan.set_step_id(std::numeric_limits<int64_t>::max());
  const int blocks = (limits.max_model_len + limits.block_size - 1) / limits.block_size;
  // The budget's prompt tokens (or a whole prompt without chunked prefill)
  // and a decode token per row.
  const int step_tokens =
      std::max(limits.max_num_batched_tokens, limits.max_model_len) + limits.max_num_seqs;
  const int tokens_per_row = step_tokens / limits.max_num_seqs;
  for (int row = 0; row < limits.max_num_seqs; ++row) {
    wv1::SequenceStep* step = plan.add_sequences();
    step->set_seq_id(std::numeric_limits<int64_t>::max());
    step->set_start_position(kMaxInt32);
    step->set_do_sample(true);
    step->set_sample_index(kMaxInt32);
    step->set_num_prompt_top_logprobs(kMaxTopLogprobs);
    step->set_token_mask_follows(true);
    step->set_input_from_last_sample(true);
    step->set_lora_slot(-1);
    step->set_num_draft_proposals(-1);
    step->set_num_next_draft_proposals(-1);
    for (int i = 0; i < tokens_per_row; ++i) {
      step->add_token_ids(limits.vocab_size - 1);
      step->add_prompt_logprob_token_ids(limits.vocab_size - 1);
    }
    for (int i = 0; i < blocks; ++i) step->add_block_table(kMaxInt32);
    FillWorstSampling(limits, limits.max_model_len / 2, step->mutable_sampling());
  }
  for (auto* moves : {plan.mutable_swap_in(), plan.mutable_swap_out(), plan.mutable_copy()}) {
    for (int i = 0; i < limits.max_num_seqs * blocks; ++i) {
      wv1::BlockMove* move = moves->Add();
      move->set_src(kMaxInt32);
      move->set_dst(kMaxInt32);
    }
  }
  return plan;
}

// The bound covers the worst plan, and is not so loose that it would size
// the workers' receive limit far past what a server sends.
TEST(StepPlanBoundTest, CoversTheLargestPlanTheLimitsAllow) {
  for (const StepPlanLimits& limits : {
           StepPlanLimits{.max_num_seqs = 4, .max_num_batched_tokens = 64, .max_model_len = 128,
                          .block_size = 4, .vocab_size = 1000, .num_eos_token_ids = 2},
           StepPlanLimits{.max_num_seqs = 16, .max_num_batched_tokens = 2048,
                          .max_model_len = 4096, .block_size = 16, .vocab_size = 32000,
                          .num_eos_token_ids = 1},
           StepPlanLimits{.max_num_seqs = 1, .max_num_batched_tokens = 8, .max_model_len = 8,
                          .block_size = 16, .vocab_size = 300000, .num_eos_token_ids = 0},
       }) {
    SCOPED_TRACE(::testing::Message() << "seqs " << limits.max_num_seqs << ", vocab "
                                      << limits.vocab_size);
    const int64_t built = static_cast<int64_t>(WorstStepPlan(limits).ByteSizeLong());
    const int64_t bound = MaxStepPlanBytes(limits);
    EXPECT_GE(bound, built);
    EXPECT_LE(bound, built + built / 4) << "built " << built;
  }
}

// Each limit counts: raising one raises the bound.
TEST(StepPlanBoundTest, GrowsWithEveryLimit) {
  const StepPlanLimits base{.max_num_seqs = 8, .max_num_batched_tokens = 1024,
                            .max_model_len = 512, .block_size = 16, .vocab_size = 32000,
                            .num_eos_token_ids = 1};
  const int64_t bound = MaxStepPlanBytes(base);
  StepPlanLimits more = base;
  more.max_num_seqs = 9;
  EXPECT_GT(MaxStepPlanBytes(more), bound);
  more = base;
  more.max_num_batched_tokens = 2048;
  EXPECT_GT(MaxStepPlanBytes(more), bound);
  more = base;
  more.max_model_len = 1024;
  EXPECT_GT(MaxStepPlanBytes(more), bound);
  more = base;
  more.block_size = 8;
  EXPECT_GT(MaxStepPlanBytes(more), bound);
  more = base;
  more.vocab_size = 64000;
  EXPECT_GT(MaxStepPlanBytes(more), bound);
  more = base;
  more.num_eos_token_ids = 3;
  EXPECT_GT(MaxStepPlanBytes(more), bound);
}

}  // namespace
}  // namespace pagoda::scheduler
