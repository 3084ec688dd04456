// GPTQ and GPTQModel checkpoints, formats gptq and gptq_v2 (see quant_readers.h).
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "worker/quant/quant_readers.h"
#include "worker/quant/quant_tensors.h"

namespace pagoda::worker {

absl::StatusOr<QuantizedWeight> ReadGptqWeight(const WeightStore& store, const QuantConfig& config,
                                               const std::string& module, int64_t out, int64_t in) {
  const int bits = config.bits;
  const int64_t per_word = 32 / bits;
  if (in % per_word != 0 || out % per_word != 0) {
    return absl::InvalidArgumentError(absl::StrCat(module, ": GPTQ packs ", per_word,
                                                   " features a word; [", out, ", ", in,
                                                   "] does not divide"));
  }
  absl::StatusOr<int64_t> groups = GroupCount(config, module, in);
  if (!groups.ok()) return groups.status();
  const std::string prefix = module + ".";
  absl::StatusOr<const void*> qweight =
      ReadIntegerTensor(store, prefix + "qweight", IntegerType::kI32, {in / per_word, out});
  if (!qweight.ok()) return qweight.status();
  absl::StatusOr<std::vector<float>> scales =
      ReadScaleTensor(store, prefix + "scales", {*groups, out});
  if (!scales.ok()) return scales.status();
  absl::StatusOr<std::vector<int32_t>> group_of_input =
      GroupOfInput(store, config.desc_act, prefix + "g_idx", in, *groups);
  if (!group_of_input.ok()) return group_of_input.status();
  const int32_t* zero_words = nullptr;
  if (!config.symmetric) {
    absl::StatusOr<const void*> qzeros =
        ReadIntegerTensor(store, prefix + "qzeros", IntegerType::kI32, {*groups, out / per_word});
    if (!qzeros.ok()) return qzeros.status();
    zero_words = static_cast<const int32_t*>(*qzeros);
  }

  QuantizedWeight weight = SizedWeight(module, bits, out, in, *groups);
  weight.format = "gptq";
  weight.group_of_input = *std::move(group_of_input);
  const auto* words = static_cast<const int32_t*>(*qweight);
  for (int64_t packed_row = 0; packed_row < in / per_word; ++packed_row) {
    for (int64_t o = 0; o < out; ++o) {
      const uint32_t word = static_cast<uint32_t>(words[packed_row * out + o]);
      for (int64_t f = 0; f < per_word; ++f) {
        weight.codes[o * in + packed_row * per_word + f] =
            static_cast<uint8_t>((word >> (bits * f)) & ((1u << bits) - 1));
      }
    }
  }
  // Format gptq stores each zero point minus one (GPTQ's historical
  // off-by-one), gptq_v2 as it is; symmetric weights center on 2^(bits-1).
  const float stored_offset = config.gptq_v2 ? 0.0f : 1.0f;
  for (int64_t g = 0; g < *groups; ++g) {
    for (int64_t o = 0; o < out; ++o) {
      weight.scales[o * *groups + g] = (*scales)[g * out + o];
      weight.zeros[o * *groups + g] =
          zero_words == nullptr
              ? static_cast<float>(1 << (bits - 1))
              : static_cast<float>(PackedField(zero_words + g * (out / per_word), o, bits)) +
                    stored_offset;
    }
  }
  return weight;
}

}  // namespace pagoda::worker
