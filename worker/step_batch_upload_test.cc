// The per-step upload: every FlatBatch array lands in one workspace region,
// in the kernels' element types, with one UploadBytes, and the host-known
// scalars describe the batch.

#include "worker/step_batch_upload.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/cache_engine.h"
#include "worker/cpu/cpu_backend.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;

// Counts uploads and their bytes, passing everything else to a CPU backend.
class CountingBackend final : public Backend {
 public:
  CountingBackend() : cpu_(CreateCpuBackend(1)) {}
  DType activation_dtype() const override { return cpu_->activation_dtype(); }
  DType default_kv_cache_dtype() const override { return cpu_->default_kv_cache_dtype(); }
  std::unique_ptr<Buffer> Allocate(DType dtype, size_t n) override {
    return cpu_->Allocate(dtype, n);
  }
  std::unique_ptr<Buffer> AllocateHost(DType dtype, size_t n) override {
    return cpu_->AllocateHost(dtype, n);
  }
  uint64_t num_allocations() const override { return cpu_->num_allocations(); }
  void UploadBytes(const void* host, void* device, size_t n) override {
    ++uploads;
    cpu_->UploadBytes(host, device, n);
  }
  void DownloadBytes(const void* device, void* host, size_t n) override {
    cpu_->DownloadBytes(device, host, n);
  }
  void Embedding(const StepBatch& b, const Tensor& t, void* o) override {
    cpu_->Embedding(b, t, o);
  }
  void RmsNorm(const void* x, const Tensor& w, int r, float e, void* o) override {
    cpu_->RmsNorm(x, w, r, e, o);
  }
  void AddRmsNorm(void* res, const void* x, const Tensor& w, int r, float e, void* o) override {
    cpu_->AddRmsNorm(res, x, w, r, e, o);
  }
  void Linear(const void* x, int r, const Tensor& w, const float* b, void* y, DType d) override {
    cpu_->Linear(x, r, w, b, y, d);
  }
  void Rope(void* q, void* k, int64_t s, const StepBatch& b, int h, int kv, int d,
            const RopeTable& t) override {
    cpu_->Rope(q, k, s, b, h, kv, d, t);
  }
  void WriteKvCache(const void* k, const void* v, int64_t s, const StepBatch& b,
                    const KvCacheLayer& c) override {
    cpu_->WriteKvCache(k, v, s, b, c);
  }
  void PagedAttention(const PagedAttentionParams& p) override { cpu_->PagedAttention(p); }
  void SiluAndMul(const void* g, int r, int d, void* o) override { cpu_->SiluAndMul(g, r, d, o); }
  void GatherRows(const void* s, const StepBatch& b, int d, void* o) override {
    cpu_->GatherRows(s, b, d, o);
  }
  void CopyRows(const void* s, size_t ss, void* d, size_t ds, size_t n, int r) override {
    cpu_->CopyRows(s, ss, d, ds, n, r);
  }
  void Sample(const Tensor& l, const SamplingBatch& p, SampleResults* o) override {
    cpu_->Sample(l, p, o);
  }
  void CopyBlocks(absl::Span<void* const> c, size_t b, absl::Span<const BlockPair> p) override {
    ++block_calls;
    cpu_->CopyBlocks(c, b, p);
  }
  void SwapBlocks(absl::Span<void* const> d, absl::Span<void* const> h, size_t b,
                  absl::Span<const BlockPair> p, SwapDirection dir) override {
    ++block_calls;
    cpu_->SwapBlocks(d, h, b, p, dir);
  }

  int uploads = 0;
  int block_calls = 0;  // CopyBlocks and SwapBlocks.

 private:
  std::unique_ptr<Backend> cpu_;
};

FlatBatch MixedBatch() {
  StepPlan plan;
  // A prefill of 5 after a cached prefix of 3, a decode, an unsampled chunk.
  SequenceStep* prefill = plan.add_sequences();
  prefill->set_seq_id(1);
  prefill->set_start_position(3);
  for (int t : {4, 5, 6, 7, 8}) prefill->add_token_ids(t);
  for (int b : {9, 2}) prefill->add_block_table(b);
  prefill->set_do_sample(true);
  prefill->mutable_sampling()->set_temperature(0.7f);
  prefill->mutable_sampling()->set_top_k(3);
  prefill->mutable_sampling()->set_top_p(0.5f);
  prefill->mutable_sampling()->set_seed(77);
  prefill->mutable_sampling()->set_num_logprobs(2);
  prefill->set_sample_index(4);
  SequenceStep* decode = plan.add_sequences();
  decode->set_seq_id(2);
  decode->set_start_position(12);
  decode->add_token_ids(9);
  for (int b : {0, 1, 3, 4}) decode->add_block_table(b);
  decode->set_do_sample(true);
  decode->mutable_sampling()->set_num_logprobs(5);
  decode->set_sample_index(12);
  SequenceStep* chunk = plan.add_sequences();
  chunk->set_seq_id(3);
  for (int t : {1, 2}) chunk->add_token_ids(t);
  chunk->add_block_table(7);
  auto batch = FlattenStepPlan(plan, BatchLimits{20, 4, 16, 0});
  EXPECT_TRUE(batch.ok()) << batch.status();
  return *batch;
}

template <typename T, typename Source>
std::vector<T> Read(const T* device, const std::vector<Source>& like) {
  return std::vector<T>(device, device + like.size());
}

template <typename T, typename Source>
std::vector<T> Widened(const std::vector<Source>& values) {
  return std::vector<T>(values.begin(), values.end());
}

TEST(StepBatchTest, OneUploadCarriesEveryArrayAndTheScalarsDescribeTheBatch) {
  CountingBackend backend;
  const FlatBatch batch = MixedBatch();
  const StepBatchCapacity capacity = StepBatchUploader::CapacityOf(batch);
  Workspace workspace(&backend);
  workspace.Reserve(StepBatchUploader::RegionBytes(capacity), 1);
  StepBatchUploader uploader(&backend);
  uploader.Reserve(capacity);
  const uint64_t allocations = backend.num_allocations();
  const StepBatch step = uploader.Upload(batch, &workspace);
  EXPECT_EQ(backend.uploads, 1);
  EXPECT_EQ(backend.num_allocations(), allocations);

  EXPECT_EQ(Read(step.token_ids, batch.input_ids), batch.input_ids);
  EXPECT_EQ(Read(step.positions, batch.positions), Widened<int64_t>(batch.positions));
  EXPECT_EQ(Read(step.slot_mapping, batch.slot_mapping), Widened<int64_t>(batch.slot_mapping));
  EXPECT_EQ(Read(step.query_start, batch.query_start), batch.query_start);
  EXPECT_EQ(Read(step.context_lens, batch.context_lens), batch.context_lens);
  EXPECT_EQ(Read(step.block_tables, batch.block_tables), batch.block_tables);
  EXPECT_EQ(Read(step.logits_indices, batch.logits_indices), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(Read(step.sampling.temperatures, batch.temperatures), (std::vector<float>{0.7f, 0}));
  EXPECT_EQ(Read(step.sampling.top_k, batch.top_k), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(Read(step.sampling.top_p, batch.top_p), (std::vector<float>{0.5f, 0}));
  EXPECT_EQ(Read(step.sampling.seeds, batch.seeds), (std::vector<uint64_t>{77, 0}));
  EXPECT_EQ(Read(step.sampling.sample_indices, batch.sample_indices),
            (std::vector<uint64_t>{4, 12}));
  for (const void* p :
       {static_cast<const void*>(step.token_ids), static_cast<const void*>(step.positions),
        static_cast<const void*>(step.block_tables),
        static_cast<const void*>(step.sampling.seeds)}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % Workspace::kAlignment, 0u);
  }

  EXPECT_EQ(step.num_tokens, 8);
  EXPECT_EQ(step.num_seqs, 3);
  EXPECT_EQ(step.num_logits_rows, 2);
  EXPECT_EQ(step.sampling.num_rows, 2);
  EXPECT_EQ(step.sampling.num_logprobs, 5);  // The most any row asked for.
  EXPECT_EQ(step.max_query_len, 5);
  EXPECT_EQ(step.max_context_len, 13);
  EXPECT_EQ(step.max_blocks_per_seq, 4);
  EXPECT_FALSE(step.decode_only);
}

TEST(StepBatchTest, DecodeOnlyWhenEverySequenceHasOneQueryToken) {
  auto backend = CreateCpuBackend(1);
  StepPlan plan;
  for (int s = 0; s < 3; ++s) {
    SequenceStep* step = plan.add_sequences();
    step->set_seq_id(s);
    step->set_start_position(2 + s);
    step->add_token_ids(s);
    step->add_block_table(s);
    step->add_block_table(s + 3);
  }
  auto batch = FlattenStepPlan(plan, BatchLimits{20, 4, 16, 0});
  ASSERT_TRUE(batch.ok());
  Workspace workspace(backend.get());
  workspace.Reserve(StepBatchUploader::RegionBytes(StepBatchUploader::CapacityOf(*batch)), 1);
  StepBatchUploader uploader(backend.get());
  const StepBatch step = uploader.Upload(*batch, &workspace);
  EXPECT_TRUE(step.decode_only);
  EXPECT_EQ(step.max_query_len, 1);
  EXPECT_EQ(step.max_context_len, 5);
  EXPECT_EQ(step.num_logits_rows, 0);
}

TEST(StepBatchTest, ProcessedLogprobsTravelOnlyWhenARowAsks) {
  auto backend = CreateCpuBackend(1);
  for (bool beam : {false, true}) {
    StepPlan plan;
    for (int s = 0; s < 3; ++s) {
      SequenceStep* step = plan.add_sequences();
      step->set_seq_id(s);
      step->add_token_ids(s);
      step->add_block_table(s);
      step->set_do_sample(true);
      step->mutable_sampling()->set_processed_logprobs(beam && s == 1);
    }
    auto batch = FlattenStepPlan(plan, BatchLimits{20, 4, 16, 0});
    ASSERT_TRUE(batch.ok()) << batch.status();
    Workspace workspace(backend.get());
    workspace.Reserve(StepBatchUploader::RegionBytes(StepBatchUploader::CapacityOf(*batch)), 1);
    StepBatchUploader uploader(backend.get());
    const StepBatch step = uploader.Upload(*batch, &workspace);
    if (!beam) {
      EXPECT_EQ(step.sampling.processed_logprobs, nullptr);
      continue;
    }
    ASSERT_NE(step.sampling.processed_logprobs, nullptr);
    EXPECT_EQ(Read(step.sampling.processed_logprobs, batch->processed_logprobs),
              (std::vector<uint8_t>{0, 1, 0}));
  }
}

// A device backend pays per call (a launch, a memcpy batch): the cache
// engine moves every layer's K and V in one call per kind of move, and none
// when there is nothing to move.
TEST(StepBatchTest, CacheEngineMovesAllLayersInOneBackendCall) {
  CountingBackend backend;
  CacheEngine cache(&backend,
                    KvCacheShape{.num_layers = 5,
                                 .num_kv_heads = 2,
                                 .block_size = 4,
                                 .head_dim = 8,
                                 .dtype = DType::kBF16},
                    8, 4);
  cache.SwapOut({{1, 0}, {2, 3}});
  EXPECT_EQ(backend.block_calls, 1);
  cache.SwapIn({{0, 5}});
  EXPECT_EQ(backend.block_calls, 2);
  cache.Copy({{5, 6}, {1, 7}});
  EXPECT_EQ(backend.block_calls, 3);
  cache.SwapIn({});
  cache.SwapOut({});
  cache.Copy({});
  EXPECT_EQ(backend.block_calls, 3);
}

}  // namespace
}  // namespace pagoda::worker
