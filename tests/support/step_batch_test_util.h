#ifndef PAGODA_TESTS_SUPPORT_STEP_BATCH_TEST_UTIL_H_
#define PAGODA_TESTS_SUPPORT_STEP_BATCH_TEST_UTIL_H_

// Tests that call backend ops directly upload their FlatBatch the way the
// model does: through a StepBatchUploader into a workspace.

#include "worker/backend.h"
#include "worker/flat_batch.h"
#include "worker/step_batch_upload.h"

namespace pagoda::worker {

// Owns the workspace the StepBatch lives in. The backend must outlive it.
class UploadedStepBatch {
 public:
  UploadedStepBatch(Backend* backend, const FlatBatch& batch)
      : workspace_(backend), uploader_(backend) {
    workspace_.Reserve(StepBatchUploader::RegionBytes(StepBatchUploader::CapacityOf(batch)), 1);
    step_ = uploader_.Upload(batch, &workspace_);
  }
  const StepBatch& get() const { return step_; }

 private:
  Workspace workspace_;
  StepBatchUploader uploader_;
  StepBatch step_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_TESTS_SUPPORT_STEP_BATCH_TEST_UTIL_H_
