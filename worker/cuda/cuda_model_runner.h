#ifndef PAGODA_WORKER_CUDA_CUDA_MODEL_RUNNER_H_
#define PAGODA_WORKER_CUDA_CUDA_MODEL_RUNNER_H_

// The CUDA ModelRunner: LlamaModel over CudaBackend on one GPU. Built only
// when nvcc is found (PAGODA_WORKER_HAS_CUDA); pagoda-worker refuses
// --device cuda otherwise.

#include <cstdint>
#include <memory>

#include "worker/cuda/cuda_decode_fusions.h"
#include "worker/model_runner.h"

namespace pagoda::worker {

struct CudaRunnerOptions {
  // CUDA device index among the visible ones; -1: the request's rank (the
  // server spawns rank r for the r-th visible GPU).
  int device = -1;
  // Issue 49's decode-step fusions, each off until a GPU has verified it
  // (cuda_decode_fusions.h); CudaDecodeFusions::All() turns every one on.
  CudaDecodeFusions decode_fusions = {};
};

// LoadModel: validates the request and the model (head size 64 or 128,
// CudaServingDType, CudaKvCacheDType) and the tensor-parallel fields
// (ParseGroupMembership, as the CPU runner), picks the rank's GPU, joins the
// group over NCCL for world_size > 1 (JoinGroup + NcclTransport; UNIMPLEMENTED
// in a build without NCCL), uploads this rank's weight slices in the serving
// dtype, profiles one forward pass of max_num_batched_tokens tokens and
// reports the KV blocks that gpu_memory_utilization of device memory leaves
// (KvBlocksFromProfile), and which GPU it uses (device_name).
// A draft model or EAGLE/EAGLE-3 head (draft_model_dir) is loaded as the CPU
// runner loads it (ModelRunnerBase::LoadDraftModel) on the same backend,
// before the profile, and its head sizes checked as the target's; the KV
// blocks reported then hold the target's and the draft's layers (one block
// id spans both caches). A draft model's one-row passes replay decode
// graphs of its own (an EAGLE head's passes run eagerly); the target's
// decode steps keep their graphs, with an EAGLE head too (its features are
// device rows the graphs write). num_speculative_tokens sizes the workspace for the
// verify steps' logits rows before capture, so none of them turns the
// graphs off, and (under a draft model or EAGLE head) verify steps of up
// to k + 1 rows a sequence at batch up to 8 replay graphs of their own
// (CudaGraphRunner::EnableVerifyGraphs); larger ones run eagerly.
// InitCache: allocates the KV blocks and pinned host swap space, then, unless
// enforce_eager, captures the decode CUDA graphs (CudaGraphRunner).
// With more than one rank the KV blocks reported are this rank's (its own KV
// heads; the server takes the minimum) and graphs stay off (see
// enforce_eager_ in the .cc).
// ExecuteStep: block moves, then a graph replay for a decode-only step that
// fits a bucket, else an eager forward, its all-reduces over NCCL on the
// backend's stream in the activation dtype; sampling on the device, rank 0
// only. A failed collective fails the step (DEADLINE_EXCEEDED, UNAVAILABLE,
// or ABORTED after Abort(), which reaches ncclCommAbort).
std::unique_ptr<ModelRunner> CreateCudaModelRunner(const CudaRunnerOptions& options);

// What a CUDA runner's decode graphs did (tests, scripts/gpu_check.sh):
// graphs captured, steps replayed, and whether they still replay (false
// once the target's buffers moved after capture, which turns them off for
// good). All zero for an eager runner and for any other runner.
struct CudaGraphCounts {
  int graphs = 0;         // Decode graphs.
  int verify_graphs = 0;  // Verify-step graphs (num_speculative_tokens > 0).
  int64_t replays = 0;    // Steps replayed, verify steps included.
  int64_t verify_replays = 0;
  int draft_graphs = 0;  // Over a draft model's cache, for its passes.
  int64_t draft_replays = 0;
  bool live = false;  // The target's graphs and the draft's still replay.
};
CudaGraphCounts CudaRunnerGraphCounts(const ModelRunner& runner);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_MODEL_RUNNER_H_
