#ifndef PAGODA_WORKER_KV_CACHE_SCALES_H_
#define PAGODA_WORKER_KV_CACHE_SCALES_H_

// The per-layer scales of an FP8 KV cache (--kv-cache-dtype fp8), read from
// the checkpoint under the names vLLM loads them by.

#include <string>

#include "absl/status/statusor.h"
#include "common/safetensors.h"

namespace pagoda::worker {

// An FP8 cache stores E4M3(k / k) codes and reads code * k (the same for v),
// as vLLM's cache ops do; 1 where the checkpoint has none.
struct KvCacheScales {
  float k = 1.0f;
  float v = 1.0f;
};

// Layer `layer`'s scales: `model.layers.N.self_attn.k_scale` and `v_scale`
// (vLLM's fp8 and compressed-tensors' kv_cache_scheme checkpoints), else
// `self_attn.k_proj.output_scale` and `v_proj.output_scale` (older
// compressed-tensors exports), else the older `self_attn.kv_scale` for
// both; when only one of a pair is there it serves both (vLLM duplicates
// it). Each must be one positive finite float ([] or [1], f32, f16 or bf16):
// anything else is INVALID_ARGUMENT naming the tensor. Scales apply to an
// FP8 cache only; they are read, and checked, whatever the cache dtype.
absl::StatusOr<KvCacheScales> ReadKvCacheScales(const WeightStore& store, int layer);

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_KV_CACHE_SCALES_H_
