// The status type of the kernels layer (kernels/attention, kernels/ops): a
// CUDA error code plus a message naming the problem. Dependency-free on
// purpose: the kernels and their tests build with nothing but the CUDA
// toolkit and GoogleTest (the lent GPU machine has no Abseil). Callers above
// this layer (the GPU model runner) convert it to absl::Status at their
// boundary, e.g. cudaErrorInvalidValue -> INVALID_ARGUMENT, else INTERNAL.
//
// Launchers keep returning plain cudaError_t; KernelStatus is for host-side
// validation that has something to say beyond the code.
#ifndef PAGODA_KERNELS_KERNEL_STATUS_H_
#define PAGODA_KERNELS_KERNEL_STATUS_H_

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

namespace pagoda::kernels {

struct KernelStatus {
  cudaError_t code = cudaSuccess;
  std::string message;  // empty when ok()

  bool ok() const { return code == cudaSuccess; }
};

inline KernelStatus OkKernelStatus() { return KernelStatus{}; }

// An unsupported or malformed configuration: code cudaErrorInvalidValue.
inline KernelStatus InvalidKernelArgument(std::string message) {
  return KernelStatus{cudaErrorInvalidValue, std::move(message)};
}

// OK for cudaSuccess; otherwise keeps `error` and says "<what>: <name>: <text>".
inline KernelStatus KernelStatusFromCuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return KernelStatus{};
  return KernelStatus{error, std::string(what) + ": " + cudaGetErrorName(error) + ": " +
                                 cudaGetErrorString(error)};
}

}  // namespace pagoda::kernels

#endif  // PAGODA_KERNELS_KERNEL_STATUS_H_
