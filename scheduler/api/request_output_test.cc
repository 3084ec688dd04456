#include "scheduler/api/request_output.h"


#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/tiny_tokenizer_suite.h"
#include "text/utf8.h"
#include "scheduler/engine/output_processor.h"

namespace pagoda::scheduler {
namespace {

class RequestOutputTest : public pagoda::testing::TinyTokenizerSuite<300> {
 protected:
  static RequestDelta Delta(int32_t token, SequenceStatus status) {
    RequestDelta delta;
    delta.request_id = "r";
    delta.seqs.push_back({0, {GeneratedToken{token, -0.5f, {}}}, status});
    delta.finished = IsFinished(status);
    return delta;
  }

  // Streams `ids` one token per delta; checks every piece and the whole.
  void CheckStreamsText(const std::vector<int>& ids) {
    RequestOutput output("r", 3, tokenizer_);
    std::string streamed;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool last = i + 1 == ids.size();
      pagoda::v1::GenerateResponse message = output.AddDelta(
          Delta(ids[i], last ? SequenceStatus::kFinishedLength : SequenceStatus::kRunning));
      ASSERT_EQ(message.outputs_size(), 1);
      EXPECT_EQ(message.outputs(0).token_ids_size(), 1);
      EXPECT_EQ(message.outputs(0).token_ids(0), ids[i]);
      EXPECT_TRUE(IsValidUtf8(message.outputs(0).text())) << "piece " << i;
      EXPECT_EQ(message.outputs(0).finish_reason(),
                last ? pagoda::v1::FINISH_REASON_LENGTH : pagoda::v1::FINISH_REASON_UNSPECIFIED);
      streamed += message.outputs(0).text();
    }
    absl::StatusOr<std::string> expected = tokenizer_->Decode(ids);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(streamed, *expected);
    EXPECT_EQ(output.whole().outputs(0).text(), *expected);
    EXPECT_EQ(output.whole().outputs(0).token_ids_size(), static_cast<int>(ids.size()));
    EXPECT_EQ(output.whole().prompt_token_count(), 3);
    EXPECT_DOUBLE_EQ(output.whole().outputs(0).cumulative_logprob(), -0.5 * ids.size());
  }

};

TEST_F(RequestOutputTest, StreamedTextConcatenatesToWholeText) {
  absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode("the quick brown fox jumps over");
  ASSERT_TRUE(ids.ok());
  CheckStreamsText(*ids);
}

TEST_F(RequestOutputTest, MultiByteCharactersAreNeverSplit) {
  absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode("naïve café 日本語 über");
  ASSERT_TRUE(ids.ok());
  CheckStreamsText(*ids);
}

TEST_F(RequestOutputTest, MapsFinishReasons) {
  EXPECT_EQ(ToFinishReason(SequenceStatus::kFinishedStopped), pagoda::v1::FINISH_REASON_STOP);
  EXPECT_EQ(ToFinishReason(SequenceStatus::kFinishedLength), pagoda::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(ToFinishReason(SequenceStatus::kFinishedAborted), pagoda::v1::FINISH_REASON_ABORTED);
  EXPECT_EQ(ToFinishReason(SequenceStatus::kRunning), pagoda::v1::FINISH_REASON_UNSPECIFIED);
}

// vLLM's num_cached_tokens reaches every message and the whole response.
TEST_F(RequestOutputTest, CachedPromptTokensReachMessagesAndTheWhole) {
  RequestOutput output("r", 40, nullptr);
  RequestDelta delta = Delta(7, SequenceStatus::kRunning);
  delta.num_cached_tokens = 32;
  EXPECT_EQ(output.AddDelta(delta).cached_prompt_token_count(), 32);
  output.AccumulateDelta(Delta(8, SequenceStatus::kFinishedLength));  // Before admission: 0.
  EXPECT_EQ(output.whole().cached_prompt_token_count(), 0);
  delta = Delta(9, SequenceStatus::kFinishedLength);
  delta.num_cached_tokens = 32;
  RequestOutput whole("r", 40, nullptr);
  whole.AccumulateDelta(delta);
  EXPECT_EQ(whole.whole().cached_prompt_token_count(), 32);
}

TEST_F(RequestOutputTest, NoTokenizerMeansTokensOnly) {
  RequestOutput output("r", 1, nullptr);
  pagoda::v1::GenerateResponse message =
      output.AddDelta(Delta(7, SequenceStatus::kFinishedStopped));
  EXPECT_EQ(message.outputs(0).text(), "");
  EXPECT_EQ(message.outputs(0).token_ids(0), 7);
  EXPECT_EQ(output.whole().outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_STOP);
}

// The unary path keeps only the whole response: it must be the one the
// streaming path accumulates, stop strings, logprobs and all.
TEST_F(RequestOutputTest, AccumulatingGivesTheWholeThatStreamingGives) {
  absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode("naïve café über the fox, STOP here");
  ASSERT_TRUE(ids.ok());
  ASSERT_GT(ids->size(), 4u);
  const OutputOptions options{{"STOP"}, false, 2};
  RequestOutput streamed("r", 3, tokenizer_, options);
  RequestOutput accumulated("r", 3, tokenizer_, options);
  for (size_t i = 0; i < ids->size(); ++i) {
    const bool last = i + 1 == ids->size();
    RequestDelta delta;
    delta.request_id = "r";
    if (i == 0) delta.prompt_logprobs.push_back(GeneratedToken{5, -1.0f, {{5, -1.0f}, {6, -2.0f}}});
    for (int index = 0; index < 2; ++index) {
      const SequenceStatus status =
          last ? SequenceStatus::kFinishedLength : SequenceStatus::kRunning;
      GeneratedToken token{(*ids)[(i + index) % ids->size()], -0.25f * (index + 1), {}};
      if (i % 2 == 0) token.top = {{token.token_id, token.logprob}, {9, -3.0f}};
      delta.seqs.push_back({index, {token}, status});
    }
    delta.finished = last;
    streamed.AddDelta(delta);
    accumulated.AccumulateDelta(delta);
  }
  EXPECT_EQ(accumulated.whole().DebugString(), streamed.whole().DebugString());
  EXPECT_EQ(accumulated.whole().outputs(0).text().find("STOP"), std::string::npos);
  EXPECT_EQ(accumulated.whole().outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_STOP);
  EXPECT_EQ(accumulated.whole().prompt_logprobs_size(), 1);
  EXPECT_EQ(accumulated.TakeStopAbort(), streamed.TakeStopAbort());
}

// Speculative decoding hands several tokens in one delta: a stop string
// inside the run ends it there, exactly as one token per delta would (no
// token after the one that completes it is kept, nor its text).
TEST_F(RequestOutputTest, AStopStringInsideAMultiTokenDeltaEndsTheRunThere) {
  absl::StatusOr<std::vector<int>> ids = tokenizer_->Encode("the fox, STOP here and more");
  ASSERT_TRUE(ids.ok());
  const OutputOptions options{{"STOP"}, false, 1};
  RequestOutput one_by_one("r", 3, tokenizer_, options);
  for (int id : *ids) one_by_one.AddDelta(Delta(id, SequenceStatus::kRunning));
  RequestOutput run("r", 3, tokenizer_, options);
  RequestDelta delta;
  delta.request_id = "r";
  delta.seqs.push_back({0, {}, SequenceStatus::kRunning});
  for (int id : *ids) delta.seqs[0].new_tokens.push_back(GeneratedToken{id, -0.5f, {}});
  const pagoda::v1::GenerateResponse message = run.AddDelta(delta);
  EXPECT_EQ(run.whole().DebugString(), one_by_one.whole().DebugString());
  EXPECT_LT(message.outputs(0).token_ids_size(), static_cast<int>(ids->size()));
  EXPECT_EQ(message.outputs(0).finish_reason(), pagoda::v1::FINISH_REASON_STOP);
  EXPECT_EQ(message.outputs(0).text().find("STOP"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::scheduler
