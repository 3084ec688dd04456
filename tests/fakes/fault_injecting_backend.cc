#include "tests/fakes/fault_injecting_backend.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::testing {
namespace {

using pagoda::worker::Backend;
using pagoda::worker::BlockPair;
using pagoda::worker::Buffer;
using pagoda::worker::PagedAttentionParams;
using pagoda::worker::RopeTable;
using pagoda::worker::SampleResults;
using pagoda::worker::SamplingBatch;
using pagoda::worker::StepBatch;
using pagoda::worker::SwapDirection;
using pagoda::worker::Tensor;

class FaultInjectingBackend final : public Backend {
 public:
  FaultInjectingBackend(std::unique_ptr<Backend> inner, FaultPlan plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {}

  DType activation_dtype() const override { return inner_->activation_dtype(); }
  DType default_kv_cache_dtype() const override { return inner_->default_kv_cache_dtype(); }
  bool computes_rope_past_table() const override { return inner_->computes_rope_past_table(); }
  std::unique_ptr<Buffer> Allocate(DType dtype, size_t n) override {
    return inner_->Allocate(dtype, n);
  }
  absl::Status status() const override { return fault_.ok() ? inner_->status() : fault_; }
  std::unique_ptr<Buffer> AllocateHost(DType dtype, size_t n) override {
    return inner_->AllocateHost(dtype, n);
  }
  uint64_t num_allocations() const override { return inner_->num_allocations(); }
  void UploadBytes(const void* host, void* device, size_t n) override {
    inner_->UploadBytes(host, device, n);
  }
  void DownloadBytes(const void* device, void* host, size_t n) override {
    inner_->DownloadBytes(device, host, n);
  }
  void Embedding(const StepBatch& batch, const Tensor& table, void* out) override {
    if (++steps_ == plan_.fail_at_step && ClaimFault()) {
      LOG(ERROR) << "injected device fault at step " << steps_;
      fault_ = absl::InvalidArgumentError(absl::StrCat("injected fault at step ", steps_));
    }
    inner_->Embedding(batch, table, out);
  }
  void RmsNorm(const void* x, const Tensor& w, int rows, float eps, void* out) override {
    inner_->RmsNorm(x, w, rows, eps, out);
  }
  void AddRmsNorm(void* residual, const void* x, const Tensor& w, int rows, float eps,
                  void* out) override {
    inner_->AddRmsNorm(residual, x, w, rows, eps, out);
  }
  void Linear(const void* x, int rows, const Tensor& w, const float* bias, void* y,
              DType y_dtype) override {
    inner_->Linear(x, rows, w, bias, y, y_dtype);
  }
  absl::StatusOr<std::unique_ptr<worker::Linear>> CreateQuantizedLinear(
      worker::QuantizedWeight weight) override {
    return inner_->CreateQuantizedLinear(std::move(weight));
  }
  void Rope(void* q, void* k, int64_t token_stride, const StepBatch& batch, int num_q_heads,
            int num_kv_heads, int head_dim, const RopeTable& table) override {
    inner_->Rope(q, k, token_stride, batch, num_q_heads, num_kv_heads, head_dim, table);
  }
  void WriteKvCache(const void* k, const void* v, int64_t token_stride, const StepBatch& batch,
                    const pagoda::worker::KvCacheLayer& cache) override {
    inner_->WriteKvCache(k, v, token_stride, batch, cache);
  }
  void PagedAttention(const PagedAttentionParams& params) override {
    inner_->PagedAttention(params);
  }
  void SiluAndMul(const void* gate_up, int rows, int dim, void* out) override {
    inner_->SiluAndMul(gate_up, rows, dim, out);
  }
  void GatherRows(const void* src, const StepBatch& batch, int dim, void* out) override {
    inner_->GatherRows(src, batch, dim, out);
  }
  void CopyRows(const void* src, size_t src_stride, void* dst, size_t dst_stride, size_t row_bytes,
                int rows) override {
    inner_->CopyRows(src, src_stride, dst, dst_stride, row_bytes, rows);
  }
  void Sample(const Tensor& logits, const SamplingBatch& params, SampleResults* out) override {
    inner_->Sample(logits, params, out);
  }
  void CopyBlocks(absl::Span<void* const> caches, size_t block_bytes,
                  absl::Span<const BlockPair> pairs) override {
    inner_->CopyBlocks(caches, block_bytes, pairs);
  }
  void SwapBlocks(absl::Span<void* const> device_caches, absl::Span<void* const> host_caches,
                  size_t block_bytes, absl::Span<const BlockPair> pairs,
                  SwapDirection direction) override {
    inner_->SwapBlocks(device_caches, host_caches, block_bytes, pairs, direction);
  }

 private:
  bool ClaimFault() const {
    if (plan_.once_marker.empty()) return true;
    const int fd = open(plan_.once_marker.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    close(fd);
    return true;
  }

  std::unique_ptr<Backend> inner_;
  const FaultPlan plan_;
  int steps_ = 0;
  absl::Status fault_;
};

}  // namespace

std::unique_ptr<Backend> WrapWithFaults(std::unique_ptr<Backend> inner, const FaultPlan& plan) {
  return std::make_unique<FaultInjectingBackend>(std::move(inner), plan);
}

FaultPlan FaultPlanFromEnvironment(int rank) {
  const char* fault_rank = std::getenv("PAGODA_TEST_FAULT_RANK");
  const char* fault_step = std::getenv("PAGODA_TEST_FAULT_STEP");
  const char* marker = std::getenv("PAGODA_TEST_FAULT_MARKER");
  int parsed_rank = -1;
  FaultPlan plan;
  if (fault_rank == nullptr || fault_step == nullptr ||
      !absl::SimpleAtoi(fault_rank, &parsed_rank) || parsed_rank != rank ||
      !absl::SimpleAtoi(fault_step, &plan.fail_at_step)) {
    return FaultPlan{};
  }
  if (marker != nullptr) plan.once_marker = marker;
  return plan;
}

}  // namespace pagoda::testing
