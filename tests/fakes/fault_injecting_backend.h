#ifndef PAGODA_TESTS_FAKES_FAULT_INJECTING_BACKEND_H_
#define PAGODA_TESTS_FAKES_FAULT_INJECTING_BACKEND_H_

// A Backend that behaves as the one it wraps until its `fail_at_step`-th
// forward pass (counted by Embedding calls, one per step on every rank), then
// takes a sticky error as a failed device does: status() returns it from then
// on, with the code a CUDA backend gives cudaErrorInvalidValue
// (INVALID_ARGUMENT), which the worker edge must report as a fault anyway.
// Test code only: linked into pagoda-worker-fault-injecting, never into
// pagoda-worker.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "worker/backend.h"

namespace pagoda::testing {

struct FaultPlan {
  int fail_at_step = 0;  // 1-based; 0 = never.
  // When not empty, the fault fires only if this file can be created (O_EXCL):
  // the first process to reach the step faults, a restarted one does not.
  std::string once_marker;
};

std::unique_ptr<pagoda::worker::Backend> WrapWithFaults(
    std::unique_ptr<pagoda::worker::Backend> inner, const FaultPlan& plan);

// The plan for `rank` from the environment: PAGODA_TEST_FAULT_RANK (the rank
// that faults), PAGODA_TEST_FAULT_STEP and PAGODA_TEST_FAULT_MARKER. Null
// plan (fail_at_step 0) when unset or for another rank.
FaultPlan FaultPlanFromEnvironment(int rank);

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_FAKES_FAULT_INJECTING_BACKEND_H_
