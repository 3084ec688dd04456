#ifndef PAGODA_WORKER_STEP_BATCH_UPLOAD_H_
#define PAGODA_WORKER_STEP_BATCH_UPLOAD_H_

// A FlatBatch (worker/flat_batch.h) uploaded to the backend: StepBatchUploader
// packs every array of one step into a staging buffer and copies it into the
// workspace with one upload, giving the StepBatch the backend ops read.

#include <cstddef>
#include <memory>

#include "worker/backend.h"
#include "worker/flat_batch.h"

namespace pagoda::worker {

// Largest step a StepBatchUploader is reserved for (a bigger one grows it,
// allocating once).
struct StepBatchCapacity {
  int tokens = 0;
  int seqs = 0;
  int blocks_per_seq = 0;
  int logits_rows = 0;
  int edits = 0;  // Logit edits of all rows (common/logits_processing.h).
  int mask_words = 0;  // Token mask words of all rows (structured outputs).
};

// Turns a FlatBatch into a StepBatch with ONE backend upload per step: every
// array is packed, 64-byte aligned, into a host staging buffer from
// Backend::AllocateHost (pinned on CUDA) laid out exactly as the workspace
// region it is copied into, then UploadBytes moves the lot. Thread safety:
// one caller at a time. The backend must outlive the uploader.
class StepBatchUploader {
 public:
  explicit StepBatchUploader(Backend* backend) : backend_(backend) {}
  StepBatchUploader(const StepBatchUploader&) = delete;
  StepBatchUploader& operator=(const StepBatchUploader&) = delete;

  // Bytes of the one workspace region a step of this capacity needs.
  static size_t RegionBytes(const StepBatchCapacity& capacity);
  // Makes the host staging buffer fit `capacity`; allocates only when it
  // does not yet.
  void Reserve(const StepBatchCapacity& capacity);
  // The capacity `batch` needs.
  static StepBatchCapacity CapacityOf(const FlatBatch& batch);

  // Uploads `batch` into one region taken from `workspace` and describes it.
  // REQUIRES: the workspace has RegionBytes(CapacityOf(batch)) left (the
  // model reserves it); Reserve(CapacityOf(batch)) was called (else this
  // grows the staging buffer, allocating). The StepBatch is valid until the
  // workspace is Reset.
  StepBatch Upload(const FlatBatch& batch, Workspace* workspace);

  // Uploads `batch`'s token mask arrays (mask_offsets, token_masks) again,
  // to where `sampling` points: the masks that followed the plan
  // (ApplyStepMasks filled them after Upload), before sampling reads them.
  // Reuses the staging buffer (uploads are synchronous), so allocates
  // nothing. REQUIRES: `sampling` is Upload(batch, ...)'s, and only the
  // masks of `batch` changed since.
  void UploadTokenMasks(const FlatBatch& batch, const SamplingBatch& sampling);

 private:
  Backend* backend_;
  std::unique_ptr<Buffer> staging_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_STEP_BATCH_UPLOAD_H_
