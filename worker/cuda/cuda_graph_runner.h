#ifndef PAGODA_WORKER_CUDA_CUDA_GRAPH_RUNNER_H_
#define PAGODA_WORKER_CUDA_CUDA_GRAPH_RUNNER_H_

// CUDA graphs for decode-only steps (vLLM's CUDAGraphRunner, without torch):
// at start-up one LlamaModel::Forward per batch-size bucket
// (GraphBatchBuckets) is captured into a graph; a decode step is padded to
// its bucket (PadDecodeBatch) and replayed, so ~10 launches per layer cost
// one graph launch.
//
// Static buffers: a graph replays fixed addresses. The model takes every
// region of a step from its workspace in a fixed order whose sizes depend
// only on the batch's shape (tokens, sequences, block-table width, logits
// rows), all of which padding fixes per bucket; so a replay step runs
// Forward with the backend in LaunchMode::kReplay, which performs only the
// one metadata upload into those same regions and skips every kernel, then
// launches the graph. Decode attention inside a graph is planned for the
// longest context the block tables allow (max_context_len), valid for every
// shorter one. A replay checks that the logits land where they did at
// capture; the buffers the graphs write must not be reallocated after
// capture: the runner compares the model's LlamaModel::buffer_generation
// (its workspace, an EAGLE-3 target's aux rows) and stops replaying once it
// moved. Other allocations (a draft model's workspace, staging buffers)
// leave the graphs on: they write none of those. The load-time reservation
// (LlamaLoadOptions: max_num_batched_tokens, max_num_seqs and
// num_speculative_tokens, whose verify steps' logits rows it holds) keeps
// every step within them.
//
// Verify steps (speculative decoding, EnableVerifyGraphs): a second family
// of graphs, one per VerifyGraphBuckets bucket, captured with k + 1 query
// rows a sequence (PadVerifyBatch, DummyVerifyBatch): their attention is
// the prefill kernel's, whose grid the capture's rows fix and whose
// per-sequence rows and contexts are read on the device.
//
// Thread safety: one caller at a time, like the model.

#include <cuda_runtime_api.h>

#include <map>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/cache_engine.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/flat_batch.h"
#include "worker/llama_model.h"

namespace pagoda::worker {

class CudaGraphRunner {
 public:
  // model, backend and cache must outlive the runner; the cache must not be
  // replaced (a new cache needs a new runner: the graphs hold its addresses).
  CudaGraphRunner(LlamaModel* model, CudaBackend* backend, CacheEngine* cache, int max_context_len);
  ~CudaGraphRunner();
  CudaGraphRunner(const CudaGraphRunner&) = delete;
  CudaGraphRunner& operator=(const CudaGraphRunner&) = delete;

  // Captures one graph per bucket up to max_num_seqs, largest first (so the
  // first warm-up sizes every workspace). Each capture is preceded by an
  // eager run of the same padded batch; with time_gemms those warm-ups pick
  // each GEMM's algorithm by timing (CudaBackend::set_gemm_timing), and the
  // graphs capture the picks. The server does not: on the H100 the timed
  // picks were within 1 % of cuBLASLt's heuristic (docs/gpu.md) and cost
  // start-up time; bench_decode_step compares both on other GPUs.
  absl::Status Capture(int max_num_seqs, bool time_gemms = false);
  // Before Capture: also capture verify graphs of `query_rows` (k + 1) rows
  // a sequence for the buckets whose tokens fit `max_tokens` (the model's
  // load-time workspace). query_rows < 2: none.
  void EnableVerifyGraphs(int query_rows, int max_tokens) {
    verify_rows_ = query_rows;
    max_verify_tokens_ = max_tokens;
  }
  int num_verify_graphs() const { return static_cast<int>(verify_graphs_.size()); }
  int num_graphs() const { return static_cast<int>(graphs_.size()); }
  // Steps replayed so far (Run calls that launched a graph), and of those
  // the verify steps.
  int64_t num_replays() const { return num_replays_; }
  int64_t num_verify_replays() const { return num_verify_replays_; }
  // False once the model's buffers moved since capture (CanRun is then
  // false for good).
  bool buffers_unmoved() const;

  // True when `batch` can replay a captured graph.
  bool CanRun(const FlatBatch& batch) const;
  // Pads `batch` to its bucket, refreshes the static metadata and replays.
  // The logits of the real rows are the first batch.num_logits_rows() rows
  // of the result (its sampling batch is cut to those rows).
  // REQUIRES: CanRun(batch).
  absl::StatusOr<ForwardOutput> Run(const FlatBatch& batch);

 private:
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    const void* logits = nullptr;  // Where the captured forward wrote them.
  };
  // One graph shape: its bucket and whether it is a verify graph.
  struct Shape {
    int bucket;
    bool verify;
  };
  // Every shape to capture, largest first (so the first warm-up sizes
  // every workspace).
  std::vector<Shape> Shapes() const;
  FlatBatch DummyBatch(Shape shape) const;
  absl::Status WarmUp();
  absl::Status CaptureOne(Shape shape);
  // The shape `batch` replays, or bucket 0 when none.
  Shape ShapeFor(const FlatBatch& batch) const;

  LlamaModel* model_;
  CudaBackend* backend_;
  CacheEngine* cache_;
  int max_context_len_;
  int blocks_per_seq_;
  std::map<int, Graph> graphs_;  // By bucket.
  std::vector<int> buckets_;
  std::map<int, Graph> verify_graphs_;  // By bucket.
  std::vector<int> verify_buckets_;
  int verify_rows_ = 0;
  int max_verify_tokens_ = 0;
  uint64_t generation_at_capture_ = 0;  // LlamaModel::buffer_generation.
  int64_t num_replays_ = 0;
  int64_t num_verify_replays_ = 0;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_GRAPH_RUNNER_H_
