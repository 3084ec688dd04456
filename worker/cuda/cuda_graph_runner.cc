#include "worker/cuda/cuda_graph_runner.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "worker/cuda/graph_batch.h"

namespace pagoda::worker {
namespace {

absl::Status GraphError(cudaError_t error, const char* what, int bucket) {
  return absl::InternalError(absl::StrCat("CUDA graph for ", bucket, " sequences: ", what, ": ",
                                          cudaGetErrorName(error), ": ",
                                          cudaGetErrorString(error)));
}

// A decode batch of `bucket` inert sequences (the padding of an empty batch).
FlatBatch DummyDecode(int bucket, int blocks_per_seq) {
  FlatBatch empty;
  empty.query_start = {0};
  empty.max_blocks_per_seq = blocks_per_seq;
  return PadDecodeBatch(empty, bucket, blocks_per_seq);
}

}  // namespace

CudaGraphRunner::CudaGraphRunner(LlamaModel* model, CudaBackend* backend, CacheEngine* cache,
                                 int max_context_len)
    : model_(model),
      backend_(backend),
      cache_(cache),
      max_context_len_(max_context_len),
      blocks_per_seq_((max_context_len + cache->shape().block_size - 1) /
                      cache->shape().block_size) {}

CudaGraphRunner::~CudaGraphRunner() {
  for (auto& [bucket, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
}

absl::Status CudaGraphRunner::Capture(int max_num_seqs, bool time_gemms) {
  buckets_ = GraphBatchBuckets(max_num_seqs);
  verify_buckets_ = VerifyGraphBuckets(max_num_seqs, verify_rows_, max_verify_tokens_);
  const ModelConfig& config = model_->config();
  backend_->ReserveDecodeWorkspace(buckets_.back(), config.num_attention_heads,
                                   config.num_key_value_heads, config.head_dim, max_context_len_);
  backend_->set_graph_max_context_len(max_context_len_);
  backend_->set_gemm_warm_up(true);  // Before the timing: it may drop the picks.
  backend_->set_gemm_timing(time_gemms);
  absl::Status warmed = WarmUp();
  backend_->set_gemm_timing(false);
  backend_->set_gemm_warm_up(false);
  if (!warmed.ok()) return warmed;
  backend_->Synchronize();
  if (!backend_->status().ok()) return backend_->status();
  const uint64_t allocations_at_capture = backend_->num_allocations();
  generation_at_capture_ = model_->buffer_generation();
  for (const Shape& shape : Shapes()) {
    if (absl::Status status = CaptureOne(shape); !status.ok()) return status;
  }
  if (backend_->num_allocations() != allocations_at_capture || !buffers_unmoved()) {
    return absl::InternalError("the workspace grew while capturing CUDA graphs");
  }
  return backend_->status();
}

std::vector<CudaGraphRunner::Shape> CudaGraphRunner::Shapes() const {
  std::vector<Shape> shapes;
  for (int bucket : buckets_) shapes.push_back({bucket, false});
  for (int bucket : verify_buckets_) shapes.push_back({bucket, true});
  // Largest first: by tokens a step (a verify bucket's are k + 1 a sequence).
  std::stable_sort(shapes.begin(), shapes.end(), [this](const Shape& a, const Shape& b) {
    return a.bucket * (a.verify ? verify_rows_ : 1) > b.bucket * (b.verify ? verify_rows_ : 1);
  });
  return shapes;
}

FlatBatch CudaGraphRunner::DummyBatch(Shape shape) const {
  return shape.verify ? DummyVerifyBatch(shape.bucket, verify_rows_, blocks_per_seq_)
                      : DummyDecode(shape.bucket, blocks_per_seq_);
}

// Warms every shape, largest first, so no capture allocates and no later
// warm-up moves the workspace under an earlier graph.
absl::Status CudaGraphRunner::WarmUp() {
  for (const Shape& shape : Shapes()) {
    auto output = model_->Forward(DummyBatch(shape), cache_);
    if (!output.ok()) return output.status();
    // Device errors are sticky: once one is recorded (an allocation or a
    // launch of the largest bucket failed) every further warm-up is wasted
    // work, possibly thousands of full forwards; stop at the first.
    if (!backend_->status().ok()) return backend_->status();
  }
  return absl::OkStatus();
}

absl::Status CudaGraphRunner::CaptureOne(Shape shape) {
  const int bucket = shape.bucket;
  const FlatBatch batch = DummyBatch(shape);
  cudaStream_t stream = backend_->stream();
  // Relaxed: the model's host code may call CUDA APIs that are merely
  // "unsafe" during capture (none enqueue work outside the stream).
  if (cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
      e != cudaSuccess) {
    return GraphError(e, "begin capture", bucket);
  }
  backend_->set_launch_mode(CudaBackend::LaunchMode::kCapture);
  absl::StatusOr<ForwardOutput> output = model_->Forward(batch, cache_);
  backend_->set_launch_mode(CudaBackend::LaunchMode::kEager);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!output.ok()) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return output.status();
  }
  if (ended != cudaSuccess) return GraphError(ended, "end capture", bucket);
  if (!backend_->status().ok()) {
    cudaGraphDestroy(graph);
    return backend_->status();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) return GraphError(instantiated, "instantiate", bucket);
  (shape.verify ? verify_graphs_ : graphs_)[bucket] =
      Graph{.exec = exec, .logits = output->logits.data};
  return absl::OkStatus();
}

bool CudaGraphRunner::buffers_unmoved() const {
  return model_->buffer_generation() == generation_at_capture_;
}

CudaGraphRunner::Shape CudaGraphRunner::ShapeFor(const FlatBatch& batch) const {
  if (IsGraphableDecode(batch, max_context_len_, blocks_per_seq_)) {
    const int bucket = GraphBucketFor(buckets_, batch.num_seqs());
    return {graphs_.contains(bucket) ? bucket : 0, false};
  }
  if (!verify_graphs_.empty() &&
      IsGraphableVerify(batch, verify_rows_, max_context_len_, blocks_per_seq_)) {
    const int bucket = GraphBucketFor(verify_buckets_, batch.num_seqs());
    return {verify_graphs_.contains(bucket) ? bucket : 0, true};
  }
  return {0, false};
}

bool CudaGraphRunner::CanRun(const FlatBatch& batch) const {
  if (graphs_.empty() || !buffers_unmoved()) return false;
  return ShapeFor(batch).bucket > 0;
}

absl::StatusOr<ForwardOutput> CudaGraphRunner::Run(const FlatBatch& batch) {
  const Shape shape = ShapeFor(batch);
  const int bucket = shape.bucket;
  const Graph& graph = (shape.verify ? verify_graphs_ : graphs_).at(bucket);
  const FlatBatch padded = shape.verify
                               ? PadVerifyBatch(batch, bucket, verify_rows_, blocks_per_seq_)
                               : PadDecodeBatch(batch, bucket, blocks_per_seq_);
  backend_->set_launch_mode(CudaBackend::LaunchMode::kReplay);
  absl::StatusOr<ForwardOutput> output = model_->Forward(padded, cache_);
  backend_->set_launch_mode(CudaBackend::LaunchMode::kEager);
  if (!output.ok()) return output.status();
  if (output->logits.data != graph.logits) {
    return absl::InternalError(
        absl::StrCat("CUDA graph for ", bucket,
                     " sequences: the replayed forward's buffers moved since capture (restart with "
                     "--enforce-eager and report this)"));
  }
  if (cudaError_t e = cudaGraphLaunch(graph.exec, backend_->stream()); e != cudaSuccess) {
    return GraphError(e, "launch", bucket);
  }
  ++num_replays_;
  if (shape.verify) ++num_verify_replays_;
  output->sampling.num_rows = batch.num_logits_rows();
  output->logits.shape[0] = batch.num_logits_rows();
  return output;
}

}  // namespace pagoda::worker
