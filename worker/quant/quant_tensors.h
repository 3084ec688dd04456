#ifndef PAGODA_WORKER_QUANT_QUANT_TENSORS_H_
#define PAGODA_WORKER_QUANT_QUANT_TENSORS_H_

// The checked reads every quantized format's reader shares: an integer
// tensor of one type and shape, a float tensor (scales) widened to f32, a
// module's group count, and group indices. Each error is one line naming the
// tensor and what is wrong with it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors.h"
#include "worker/quant/quant_config.h"

namespace pagoda::worker {

// The data of integer tensor `name`, which must be of `type` and `shape`.
absl::StatusOr<const void*> ReadIntegerTensor(const WeightStore& store, const std::string& name,
                                              IntegerType type, const std::vector<int64_t>& shape);
// Float tensor `name` (f32, f16 or bf16) of `shape`, widened to f32.
absl::StatusOr<std::vector<float>> ReadScaleTensor(const WeightStore& store,
                                                   const std::string& name,
                                                   const std::vector<int64_t>& shape);
// The groups of a module's `in` input features: 1 for group_size -1, else
// in / group_size. INVALID_ARGUMENT naming the module when it does not divide.
absl::StatusOr<int64_t> GroupCount(const QuantConfig& config, const std::string& module,
                                   int64_t in);
// Input i's group: i / (in / groups), or tensor `g_idx_name` ([in] I32, each
// in [0, groups)) when act-order is on (then it must be there).
absl::StatusOr<std::vector<int32_t>> GroupOfInput(const WeightStore& store, bool act_order,
                                                  const std::string& g_idx_name, int64_t in,
                                                  int64_t groups);
// The b-bit field `index` of packed little-end-first 32-bit words.
inline uint32_t PackedField(const int32_t* words, int64_t index, int bits) {
  const int per_word = 32 / bits;
  return (static_cast<uint32_t>(words[index / per_word]) >> (bits * (index % per_word))) &
         ((1u << bits) - 1);
}

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_QUANT_QUANT_TENSORS_H_
