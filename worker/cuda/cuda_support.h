#ifndef PAGODA_WORKER_CUDA_CUDA_SUPPORT_H_
#define PAGODA_WORKER_CUDA_CUDA_SUPPORT_H_

// What the CUDA worker can serve, and how it sizes its KV cache: plain host
// code with no CUDA dependency, so every build (CI has no nvcc) checks and
// tests the same rules the CUDA model runner applies at load.

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/model_config.h"

namespace pagoda::worker {

// Head sizes the paged-attention kernels are built for
// (kernels/attention/paged_attention.h).
inline constexpr int kCudaHeadSizes[] = {64, 128};
// Most query heads per kv head the kernels take (GQA group size).
inline constexpr int kCudaMaxGqaGroup = 8;
// Most sequences one step may hold: the attention kernels put sequences on
// the grid's y axis, which CUDA caps at 65535 (kernels/attention's
// CheckDecodeSupported and CheckPrefillSupported refuse more).
inline constexpr int kCudaMaxNumSeqs = 65535;
// The longest context CUDA serves and graphs are planned for: the rotary
// table's bound. The rotary kernel reads only the table, so the backend
// refuses positions past it.
inline constexpr int kCudaMaxContext = kMaxRopeTablePositions;

// The longest context (prompt + output) CUDA serves for `config`, which
// graphs are planned for and the worker reports to the server
// (LoadModelResponse.max_model_len): the model's, capped at kCudaMaxContext.
int CudaMaxModelLen(const ModelConfig& config);

// OK when the CUDA kernels can run `config`; otherwise INVALID_ARGUMENT with
// one line naming the unsupported value and what is supported, e.g.
// "head size 96 is not supported on CUDA (supported: 64, 128)".
absl::Status CheckCudaModelSupported(const ModelConfig& config);

// The serving dtype on CUDA (activations, weights and by default the KV
// cache): `requested` (--dtype) when it is bf16 or f16; for "auto" (nullopt)
// the checkpoint's dtype when it is bf16 or f16, and bf16 for an f32
// checkpoint, as vLLM does. float32 is INVALID_ARGUMENT: the CUDA kernels
// compute in bf16/f16 with f32 accumulation.
absl::StatusOr<DType> CudaServingDType(std::optional<DType> requested, DType checkpoint);

// The checkpoint dtype config.json names (torch_dtype: "bfloat16",
// "float16"/"half", "float32"/"float"); f32 when absent or unknown.
DType CheckpointDType(std::string_view torch_dtype);

// KV cache dtype on CUDA: --kv-cache-dtype (nullopt = auto = the serving
// dtype). The attention kernels read the cache in the activation dtype or
// as FP8 E4M3 or E5M2 (fp8, fp8_e4m3, fp8_e5m2: one byte an element, twice
// the blocks of bf16); any other choice is INVALID_ARGUMENT.
// (The server still refuses FP8 with --device cuda until a GPU run has
// passed its kernel tests: docs/quantization.md.)
absl::StatusOr<DType> CudaKvCacheDType(std::optional<DType> requested, DType serving);

// vLLM's profiling rule: of `total_bytes` of device memory,
// `gpu_memory_utilization` may be used; what the profiled forward pass
// peaked at (weights, activations, library workspaces) is taken first and
// the rest becomes KV blocks of `bytes_per_block`. 0 when nothing is left.
// INVALID_ARGUMENT unless 0 < utilization <= 1 and bytes_per_block > 0.
absl::StatusOr<int32_t> KvBlocksFromProfile(int64_t total_bytes, double gpu_memory_utilization,
                                            int64_t peak_bytes, int64_t bytes_per_block);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_CUDA_CUDA_SUPPORT_H_
