#ifndef PAGODA_WORKER_CUDA_CUDA_INT_LINEAR_H_
#define PAGODA_WORKER_CUDA_CUDA_INT_LINEAR_H_

// CudaIntLinear: an int4/int8 projection on the device, weight-only (AWQ,
// GPTQ with or without act-order, compressed-tensors pack-quantized W4A16
// and W8A16) or W8A8 (compressed-tensors int-quantized: int8 weights per
// channel, dynamic per-token int8 inputs), the CUDA side of
// worker/linear.h's one-Linear-per-format rule. The weight stays packed in
// kernels/ops/int_linear.h's layout (repacked at load from worker/quant's unpacked form), with f32
// (scale, zero) pairs per group, and runs through CudaBackend::IntLinear. Written and built without
// a GPU; the server refuses quantized checkpoints on
// --device cuda until scripts/gpu_check.sh has passed its tests
// (docs/quantization.md).

#include <memory>

#include "absl/status/statusor.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

// The Linear of `weight` (integer codes, no input quantization or int8
// per token) on `backend`, which must outlive it. UNIMPLEMENTED naming the
// module for what the device layout cannot hold (groups of unequal sizes, a
// zero point that is not an integer code, W8A8 scales per group). Uploads the packed codes, scales,
// zero points, act-order permutation and bias, and grows the backend's int scratch to this weight's
// dequantized size.
absl::StatusOr<std::unique_ptr<Linear>> CreateCudaIntLinear(CudaBackend* backend,
                                                            QuantizedWeight weight);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_INT_LINEAR_H_
