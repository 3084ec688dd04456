// The typed backend interface: Tensor views, the workspace arena, and the
// model's contract that a step allocates no backend memory (counted).

#include "worker/backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/cache_engine.h"
#include "worker/communicator.h"
#include "worker/cpu/cpu_backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {
namespace {

using pagoda::worker::v1::SequenceStep;
using pagoda::worker::v1::StepPlan;

std::string Env(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : fallback;
}

TEST(TensorTest, CarriesDTypeShapeAndMemoryOfItsBuffer) {
  auto backend = CreateCpuBackend(1);
  auto buffer = backend->Allocate(DType::kBF16, 6);
  EXPECT_EQ(buffer->dtype(), DType::kBF16);
  EXPECT_EQ(buffer->size(), 6u);
  EXPECT_EQ(buffer->nbytes(), 12u);
  const Tensor tensor = Tensor::Of(*buffer, {2, 3});
  EXPECT_EQ(tensor.dtype, DType::kBF16);
  EXPECT_EQ(tensor.rank, 2);
  EXPECT_EQ(tensor.dim(0), 2);
  EXPECT_EQ(tensor.dim(1), 3);
  EXPECT_EQ(tensor.num_elements(), 6);
  EXPECT_EQ(tensor.data, buffer->raw());
}

TEST(TensorDeathTest, F32ViewOfOtherDTypeAndWrongShapeAbort) {
  auto backend = CreateCpuBackend(1);
  auto buffer = backend->Allocate(DType::kF16, 4);
  EXPECT_DEATH(buffer->data(), "f32 view");
  EXPECT_DEATH(Tensor::Of(*buffer, {3, 2}), "shape");
}

TEST(WorkspaceTest, RegionsAreAlignedDisjointAndReuseOneAllocation) {
  auto backend = CreateCpuBackend(1);
  Workspace workspace(backend.get());
  workspace.Reserve(400, 3);
  const uint64_t allocations = backend->num_allocations();
  EXPECT_EQ(allocations, 1u);
  for (int round = 0; round < 3; ++round) {
    workspace.Reset();
    char* a = static_cast<char*>(workspace.Take(DType::kF32, 33));
    char* b = static_cast<char*>(workspace.Take(1));  // Bytes.
    char* c = static_cast<char*>(workspace.Take(DType::kBF16, 133));
    for (char* p : {a, b, c}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    EXPECT_GE(b, a + 33 * 4);
    EXPECT_GE(c, b + 1);
    workspace.Reserve(200, 2);  // Smaller than what is there: no allocation.
  }
  EXPECT_EQ(backend->num_allocations(), allocations);
  workspace.Reserve(4000, 1);
  EXPECT_EQ(backend->num_allocations(), allocations + 1);
  EXPECT_GE(workspace.capacity(), 4000u);
}

// CopyRows against a plain loop, over odd row widths and strides: each row
// lands at its stride, and the bytes between rows keep their values.
TEST(BackendTest, CopyRowsMovesEachRowToItsStrideAndNothingElse) {
  auto backend = CreateCpuBackend(1);
  struct Shape {
    size_t row_bytes, src_stride, dst_stride;
    int rows;
  };
  for (const Shape& shape :
       {Shape{6, 6, 10, 7}, Shape{3, 11, 5, 1}, Shape{64, 128, 192, 5}, Shape{5, 5, 5, 0}}) {
    const size_t rows = static_cast<size_t>(shape.rows);
    std::vector<uint8_t> src(std::max<size_t>(1, rows * shape.src_stride));
    std::vector<uint8_t> dst(std::max<size_t>(1, rows * shape.dst_stride));
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<uint8_t>(200 + i % 50);
    std::vector<uint8_t> want = dst;
    for (size_t r = 0; r < rows; ++r) {
      for (size_t b = 0; b < shape.row_bytes; ++b) {
        want[r * shape.dst_stride + b] = src[r * shape.src_stride + b];
      }
    }
    auto device_src = backend->Allocate(DType::kF32, (src.size() + 3) / 4);
    auto device_dst = backend->Allocate(DType::kF32, (dst.size() + 3) / 4);
    backend->UploadBytes(src.data(), device_src->raw(), src.size());
    backend->UploadBytes(dst.data(), device_dst->raw(), dst.size());
    backend->CopyRows(device_src->raw(), shape.src_stride, device_dst->raw(), shape.dst_stride,
                      shape.row_bytes, shape.rows);
    backend->DownloadBytes(device_dst->raw(), dst.data(), dst.size());
    EXPECT_EQ(dst, want) << shape.row_bytes << " bytes x " << shape.rows;
  }
}

TEST(WorkspaceDeathTest, TakingPastTheReservationAborts) {
  auto backend = CreateCpuBackend(1);
  Workspace workspace(backend.get());
  workspace.Reserve(64, 1);
  workspace.Take(64);
  EXPECT_DEATH(workspace.Take(256), "workspace reservation exceeded");
}

class ForwardAllocationTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/pagoda_backend_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    const std::string command =
        absl::StrCat(Env("PAGODA_PYTHON3", "/usr/bin/python3"), " ", Env("PAGODA_SOURCE_DIR", "."),
                     "/scripts/make_tiny_model.py --out ", *dir_,
                     "/model --vocab-size 40 --hidden-size 32 --intermediate-size 48 --num-layers 2"
                     " --num-heads 4 --num-kv-heads 2 --dtype bf16 --seed 3 > /dev/null");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  // One step of `seqs` sequences of `tokens` prompt tokens each, sampled
  // (with top-k, top-p and logprobs, so every sampling path runs).
  static FlatBatch Batch(int seqs, int tokens) {
    StepPlan plan;
    for (int s = 0; s < seqs; ++s) {
      SequenceStep* step = plan.add_sequences();
      step->set_seq_id(s);
      for (int i = 0; i < tokens; ++i) step->add_token_ids((s * 7 + i) % 40);
      for (int b = 0; b < (tokens + 3) / 4; ++b) step->add_block_table(s * 4 + b);
      step->set_do_sample(true);
      step->mutable_sampling()->set_temperature(s == 0 ? 0.0f : 0.8f);
      step->mutable_sampling()->set_top_k(5);
      step->mutable_sampling()->set_top_p(0.9f);
      step->mutable_sampling()->set_num_logprobs(3);
    }
    auto batch = FlattenStepPlan(plan, BatchLimits{40, 4, 64, 0});
    EXPECT_TRUE(batch.ok()) << batch.status();
    return *batch;
  }

  static std::string* dir_;
};
std::string* ForwardAllocationTest::dir_ = nullptr;

// The step batch upload, the forward pass and sampling take nothing from the
// backend once the model is loaded, whatever the KV cache dtype.
class ForwardAllocationByCacheTest : public ForwardAllocationTest,
                                     public testing::WithParamInterface<DType> {};

TEST_P(ForwardAllocationByCacheTest, AStepWithinTheLoadTimeSizingAllocatesNothing) {
  auto backend = CreateCpuBackend(2);
  auto communicator = CreateSingleRankCommunicator();
  auto model = LlamaModel::Load(*dir_ + "/model", backend.get(), communicator.get(),
                                {.max_num_batched_tokens = 24, .max_num_seqs = 3, .block_size = 4});
  ASSERT_TRUE(model.ok()) << model.status();
  CacheEngine cache(backend.get(), (*model)->CacheShape(4, GetParam()), 64, 0);
  SampleResults samples;
  auto step = [&](int seqs, int tokens) {
    auto forward = (*model)->Forward(Batch(seqs, tokens), &cache);
    ASSERT_TRUE(forward.ok()) << forward.status();
    ASSERT_EQ(forward->logits.dim(0), seqs);
    ASSERT_EQ(forward->logits.dim(1), 40);
    backend->Sample(forward->logits, forward->sampling, &samples);
    ASSERT_EQ(samples.token_ids.size(), static_cast<size_t>(seqs));
    for (int32_t token : samples.token_ids) EXPECT_TRUE(token >= 0 && token < 40) << token;
    EXPECT_EQ(samples.num_logprobs, 3);
  };
  const uint64_t after_load = backend->num_allocations();
  for (const auto& [seqs, tokens] : {std::pair{3, 8}, std::pair{1, 1}, std::pair{2, 5}}) {
    step(seqs, tokens);
    EXPECT_EQ(backend->num_allocations(), after_load) << seqs << " x " << tokens;
  }
  // A step past the sizing grows the workspace once (and the upload staging,
  // if the load-time block tables did not leave room), and then no more.
  step(3, 12);
  const uint64_t grown = backend->num_allocations();
  EXPECT_GT(grown, after_load);
  EXPECT_LE(grown, after_load + 2);
  step(3, 12);
  EXPECT_EQ(backend->num_allocations(), grown);
}

INSTANTIATE_TEST_SUITE_P(CacheDTypes, ForwardAllocationByCacheTest,
                         testing::Values(DType::kF32, DType::kBF16),
                         [](const testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

TEST_F(ForwardAllocationTest, WeightsKeepTheCheckpointDTypeUnlessForced) {
  auto communicator = CreateSingleRankCommunicator();
  auto weight_bytes = [&](std::optional<DType> dtype) -> size_t {
    auto backend = CreateCpuBackend(1);
    auto model = LlamaModel::Load(*dir_ + "/model", backend.get(), communicator.get(),
                                  {.weight_dtype = dtype});
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? (*model)->weight_bytes() : 0;
  };
  // The checkpoint is bf16: "auto" keeps 2 bytes a weight, not widened to 4.
  const size_t kept = weight_bytes(std::nullopt);
  EXPECT_GT(kept, 0u);
  EXPECT_EQ(weight_bytes(DType::kF32), 2 * kept);
  EXPECT_EQ(weight_bytes(DType::kF16), kept);
  EXPECT_EQ(weight_bytes(DType::kBF16), kept);
}

}  // namespace
}  // namespace pagoda::worker
