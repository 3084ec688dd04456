#ifndef PAGODA_WORKER_CUDA_CUDA_FP8_LINEAR_H_
#define PAGODA_WORKER_CUDA_CUDA_FP8_LINEAR_H_

// CudaFp8Linear: an FP8 W8A8 projection on the device (compressed-tensors
// float-quantized, vLLM's fp8, online --quantization fp8), the CUDA side of
// worker/linear.h's one-Linear-per-format rule. The weight stays E4M3 codes
// with one f32 scale per output row (a per-tensor scale repeated), inputs
// are quantized per token or by the checkpoint's static input_scale, and
// the product runs through CudaBackend::Fp8Linear. Written and built
// without a GPU; the server refuses FP8 checkpoints on --device cuda until
// scripts/gpu_check.sh has passed its tests (docs/quantization.md).

#include <memory>

#include "absl/status/statusor.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

// The Linear of `weight` (code_type kFloat8E4M3) on `backend`, which must
// outlive it. UNIMPLEMENTED naming the module for what no CUDA kernel here
// runs: FP8 weights without input quantization (W8A16), scales per group
// rather than per row, or in/out features that are not multiples of 16
// (cuBLASLt's FP8 rule); INVALID_ARGUMENT for a static input scale that is
// not finite and positive. Uploads the codes, scales and bias and reserves
// the backend's FP8 scratch.
absl::StatusOr<std::unique_ptr<Linear>> CreateCudaFp8Linear(CudaBackend* backend,
                                                            QuantizedWeight weight);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_FP8_LINEAR_H_
