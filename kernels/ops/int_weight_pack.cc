#include "kernels/ops/int_weight_pack.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagoda::kernels {
namespace {

// The stable order of inputs by group: the identity unless act-order
// shuffled them (GPTQ desc_act's g_idx).
std::vector<int32_t> InputsByGroup(const UnpackedIntWeight& w) {
  std::vector<int32_t> order(w.in);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&w](int32_t a, int32_t b) {
    return w.group_of_input[a] < w.group_of_input[b];
  });
  return order;
}

// The length every run of equal groups has in `order` (the last may be
// shorter), or 0 when they differ.
int64_t UniformRunLength(const UnpackedIntWeight& w, const std::vector<int32_t>& order) {
  std::vector<int64_t> lengths;
  for (int64_t j = 0; j < w.in; ++j) {
    if (j == 0 || w.group_of_input[order[j]] != w.group_of_input[order[j - 1]]) {
      lengths.push_back(0);
    }
    ++lengths.back();
  }
  if (lengths.empty()) return 0;
  for (size_t k = 0; k + 1 < lengths.size(); ++k) {
    if (lengths[k] != lengths[0]) return 0;
  }
  return lengths.back() <= lengths[0] ? lengths[0] : 0;
}

bool ZeroPointFits(float zero, int bits) {
  return std::isfinite(zero) && zero == std::floor(zero) && zero >= 0.0f &&
         zero <= static_cast<float>(1 << bits);
}

}  // namespace

HostPackedIntWeight PackIntWeight(const UnpackedIntWeight& w, std::string* error) {
  HostPackedIntWeight packed;
  error->clear();
  if ((w.bits != 4 && w.bits != 8) || w.out <= 0 || w.in <= 0 || w.num_groups <= 0) {
    *error = "only 4- and 8-bit codes of a non-empty weight";
    return packed;
  }
  const std::vector<int32_t> order = InputsByGroup(w);
  packed.group_size = UniformRunLength(w, order);
  if (packed.group_size == 0) {
    *error = "its groups hold different numbers of inputs";
    return packed;
  }
  packed.runs = (w.in + packed.group_size - 1) / packed.group_size;
  const int64_t per_word = 32 / w.bits;
  const int64_t per_vector = 4 * per_word;
  packed.words_per_row = (w.in + per_vector - 1) / per_vector * 4;
  packed.codes.assign(w.out * packed.words_per_row, 0u);
  packed.scale_zero.resize(w.out * packed.runs * 2);
  const uint32_t code_limit = 1u << w.bits;
  for (int64_t o = 0; o < w.out; ++o) {
    for (int64_t j = 0; j < w.in; ++j) {
      const uint32_t code = w.codes[o * w.in + order[j]];
      if (code >= code_limit) {
        *error = "a code is out of range";
        return packed;
      }
      packed.codes[o * packed.words_per_row + j / per_word] |= code << (w.bits * (j % per_word));
    }
    for (int64_t run = 0; run < packed.runs; ++run) {
      const int64_t g = w.group_of_input[order[run * packed.group_size]];
      const float zero = w.zeros[o * w.num_groups + g];
      if (!ZeroPointFits(zero, w.bits)) {
        *error = "a zero point is not an integer code";
        return packed;
      }
      packed.scale_zero[(o * packed.runs + run) * 2] = w.scales[o * w.num_groups + g];
      packed.scale_zero[(o * packed.runs + run) * 2 + 1] = zero;
    }
  }
  bool identity = true;
  for (int64_t j = 0; j < w.in && identity; ++j) identity = order[j] == j;
  if (!identity) packed.perm = order;
  return packed;
}

}  // namespace pagoda::kernels
