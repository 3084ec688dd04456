#include "worker/cuda/graph_batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace pagoda::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

TEST(GraphBatchTest, BucketsAreVllmCaptureSizes) {
  EXPECT_THAT(GraphBatchBuckets(1), ElementsAre(1));
  EXPECT_THAT(GraphBatchBuckets(3), ElementsAre(1, 2, 3));
  EXPECT_THAT(GraphBatchBuckets(4), ElementsAre(1, 2, 4));
  EXPECT_THAT(GraphBatchBuckets(20), ElementsAre(1, 2, 4, 8, 16, 20));
  EXPECT_THAT(GraphBatchBuckets(32), ElementsAre(1, 2, 4, 8, 16, 24, 32));
  EXPECT_EQ(GraphBatchBuckets(256).size(), 3u + 32u);
  const std::vector<int> buckets = GraphBatchBuckets(32);
  EXPECT_EQ(GraphBucketFor(buckets, 1), 1);
  EXPECT_EQ(GraphBucketFor(buckets, 3), 4);
  EXPECT_EQ(GraphBucketFor(buckets, 17), 24);
  EXPECT_EQ(GraphBucketFor(buckets, 32), 32);
  EXPECT_EQ(GraphBucketFor(buckets, 33), 0);
}

// Two decoding sequences: contexts 5 and 17 over blocks of 16.
FlatBatch TwoDecodes() {
  FlatBatch batch;
  batch.input_ids = {11, 12};
  batch.positions = {4, 16};
  batch.slot_mapping = {3 * 16 + 4, 7 * 16 + 0};
  batch.query_start = {0, 1, 2};
  batch.context_lens = {5, 17};
  batch.block_tables = {3, 0, 6, 7};
  batch.max_blocks_per_seq = 2;
  batch.logits_indices = {0, 1};
  batch.sample_sequences = {0, 1};
  batch.temperatures = {0.0f, 0.7f};
  batch.top_k = {0, 5};
  batch.top_p = {1.0f, 0.9f};
  batch.seeds = {1, 2};
  batch.sample_indices = {4, 9};
  batch.num_logprobs = {0, 3};
  return batch;
}

TEST(GraphBatchTest, OnlyDecodeBatchesWithinTheCapturedShapeReplay) {
  EXPECT_TRUE(IsGraphableDecode(TwoDecodes(), 17, 2));
  EXPECT_FALSE(IsGraphableDecode(TwoDecodes(), 16, 2));  // context 17 > 16
  EXPECT_FALSE(IsGraphableDecode(TwoDecodes(), 32, 1));  // table of 2 > 1
  FlatBatch prefill = TwoDecodes();
  prefill.input_ids.push_back(13);
  prefill.query_start = {0, 2, 3};
  prefill.logits_indices = {1, 2};
  EXPECT_FALSE(IsGraphableDecode(prefill, 64, 4));
  FlatBatch unsampled = TwoDecodes();
  unsampled.logits_indices = {1};
  EXPECT_FALSE(IsGraphableDecode(unsampled, 64, 4));
  EXPECT_FALSE(IsGraphableDecode(FlatBatch{}, 64, 4));
  FlatBatch masked = TwoDecodes();  // Structured outputs: the mask moves the logits.
  masked.mask_offsets = {0, -1};
  masked.token_masks = {1};
  EXPECT_FALSE(IsGraphableDecode(masked, 64, 4));
}

TEST(GraphBatchTest, PaddingKeepsRealRowsAndMakesInertOnes) {
  const FlatBatch padded = PadDecodeBatch(TwoDecodes(), 4, 3);
  EXPECT_THAT(padded.input_ids, ElementsAre(11, 12, 0, 0));
  EXPECT_THAT(padded.positions, ElementsAre(4, 16, 0, 0));
  EXPECT_THAT(padded.slot_mapping, ElementsAre(52, 112, -1, -1));
  EXPECT_THAT(padded.query_start, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_THAT(padded.context_lens, ElementsAre(5, 17, 1, 1));
  EXPECT_EQ(padded.max_blocks_per_seq, 3);
  EXPECT_THAT(padded.block_tables, ElementsAreArray({3, 0, 0, 6, 7, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_THAT(padded.logits_indices, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(padded.temperatures, ElementsAre(0.0f, 0.7f, 0.0f, 0.0f));
  EXPECT_THAT(padded.top_k, ElementsAre(0, 5, 0, 0));
  EXPECT_THAT(padded.top_p, ElementsAre(1.0f, 0.9f, 1.0f, 1.0f));
  EXPECT_THAT(padded.seeds, ElementsAre(1u, 2u, 0u, 0u));
  EXPECT_THAT(padded.sample_indices, ElementsAre(4u, 9u, 0u, 0u));
  EXPECT_THAT(padded.num_logprobs, ElementsAre(0, 3, 0, 0));
  EXPECT_EQ(padded.num_tokens(), 4);
  EXPECT_EQ(padded.num_seqs(), 4);
  // The same shape whatever the real batch: replay sees one layout.
  FlatBatch one = TwoDecodes();
  one = PadDecodeBatch(PadDecodeBatch(TwoDecodes(), 2, 2), 4, 3);
  EXPECT_EQ(one.block_tables.size(), padded.block_tables.size());
}

// A verify step: sequence 0 verifies two drafts (3 rows, each sampled),
// sequence 1 has none (its one row).
FlatBatch VerifyOfTwo() {
  FlatBatch batch = TwoDecodes();
  batch.input_ids = {11, 21, 22, 12};
  batch.positions = {4, 5, 6, 16};
  batch.slot_mapping = {52, 53, 54, 112};
  batch.query_start = {0, 3, 4};
  batch.context_lens = {7, 17};
  batch.logits_indices = {0, 1, 2, 3};
  batch.sample_sequences = {0, 0, 0, 1};
  batch.temperatures = {0.0f, 0.0f, 0.0f, 0.7f};
  batch.top_k = {0, 0, 0, 5};
  batch.top_p = {1.0f, 1.0f, 1.0f, 0.9f};
  batch.seeds = {1, 1, 1, 2};
  batch.sample_indices = {4, 5, 6, 9};
  batch.num_logprobs = {0, 0, 0, 3};
  return batch;
}

TEST(GraphBatchTest, VerifyBucketsStopAtEightAndTheReservedTokens) {
  EXPECT_THAT(VerifyGraphBuckets(256, 5, 2048), ElementsAre(1, 2, 4, 8));
  EXPECT_THAT(VerifyGraphBuckets(3, 5, 2048), ElementsAre(1, 2, 3));
  EXPECT_THAT(VerifyGraphBuckets(256, 5, 20), ElementsAre(1, 2, 4));  // 8 x 5 > 20
  EXPECT_TRUE(VerifyGraphBuckets(256, 1, 2048).empty());              // no drafts
}

TEST(GraphBatchTest, OnlyVerifyStepsWithinTheCapturedRowsReplay) {
  EXPECT_TRUE(IsGraphableVerify(VerifyOfTwo(), 5, 17, 2));
  EXPECT_TRUE(IsGraphableVerify(VerifyOfTwo(), 3, 17, 2));
  EXPECT_FALSE(IsGraphableVerify(VerifyOfTwo(), 2, 17, 2));  // 3 rows > 2
  EXPECT_FALSE(IsGraphableVerify(VerifyOfTwo(), 5, 16, 2));  // context 17 > 16
  EXPECT_FALSE(IsGraphableVerify(VerifyOfTwo(), 5, 17, 1));  // table of 2 > 1
  EXPECT_FALSE(IsGraphableVerify(TwoDecodes(), 5, 17, 2));   // decode graphs' batch
  EXPECT_FALSE(IsGraphableVerify(FlatBatch{}, 5, 17, 2));
  FlatBatch edited = VerifyOfTwo();  // Logit edits move the logits.
  edited.edit_offsets = {0, 1, 1, 1, 1};
  edited.edits = {LogitEdit{}};
  EXPECT_FALSE(IsGraphableVerify(edited, 5, 17, 2));
}

TEST(GraphBatchTest, VerifyPaddingKeepsRealRowsAndTheCapturedShape) {
  const FlatBatch padded = PadVerifyBatch(VerifyOfTwo(), 4, 3, 3);
  EXPECT_EQ(padded.num_tokens(), 12);
  EXPECT_EQ(padded.num_seqs(), 4);
  EXPECT_EQ(padded.num_logits_rows(), 12);
  EXPECT_THAT(padded.input_ids, ElementsAre(11, 21, 22, 12, 0, 0, 0, 0, 0, 0, 0, 0));
  EXPECT_THAT(padded.positions, ElementsAre(4, 5, 6, 16, 0, 0, 0, 0, 0, 0, 0, 0));
  EXPECT_THAT(padded.slot_mapping, ElementsAre(52, 53, 54, 112, -1, -1, -1, -1, -1, -1, -1, -1));
  // The padding sequences have no rows: the prefill kernel skips them.
  EXPECT_THAT(padded.query_start, ElementsAre(0, 3, 4, 4, 4));
  EXPECT_THAT(padded.context_lens, ElementsAre(7, 17, 1, 1));
  EXPECT_THAT(padded.block_tables, ElementsAreArray({3, 0, 0, 6, 7, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_THAT(padded.logits_indices, ElementsAre(0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0));
  EXPECT_THAT(padded.sample_indices, ElementsAre(4u, 5u, 6u, 9u, 0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u));
  EXPECT_THAT(padded.temperatures.back(), 0.0f);
  EXPECT_EQ(padded.edit_offsets.size(), 13u);
  // The capture's batch has the same array sizes: one layout for both.
  const FlatBatch dummy = DummyVerifyBatch(4, 3, 3);
  EXPECT_THAT(dummy.query_start, ElementsAre(0, 3, 6, 9, 12));
  EXPECT_THAT(dummy.context_lens, ElementsAre(3, 3, 3, 3));
  EXPECT_THAT(dummy.positions, ElementsAre(0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2));
  EXPECT_THAT(dummy.logits_indices, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
  for (const FlatBatch* batch : {&padded, &dummy}) {
    EXPECT_EQ(batch->num_tokens(), 12);
    EXPECT_EQ(batch->block_tables.size(), 12u);
    EXPECT_EQ(batch->sample_sequences.size(), 12u);
    EXPECT_EQ(batch->mask_offsets.size(), 12u);
    EXPECT_EQ(batch->penalties.size(), 12u);
    EXPECT_EQ(batch->processed_logprobs.size(), 12u);
    EXPECT_TRUE(batch->edits.empty());
  }
}

}  // namespace
}  // namespace pagoda::worker
