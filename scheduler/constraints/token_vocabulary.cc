#include "scheduler/constraints/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace pagoda::constraints {

absl::StatusOr<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::Create(
    std::vector<std::optional<std::string>> token_bytes, int mask_size) {
  if (mask_size < static_cast<int64_t>(token_bytes.size()) || mask_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("constraint vocabulary: ", token_bytes.size(),
                                                   " tokens do not fit a mask of ", mask_size));
  }
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (token_bytes[id].has_value() && !token_bytes[id]->empty()) {
      order.push_back(static_cast<int32_t>(id));
    }
  }
  if (order.empty()) {
    return absl::InvalidArgumentError("constraint vocabulary: no token has bytes");
  }
  // Byte order (unsigned), ties by id.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return *token_bytes[a] < *token_bytes[b];
  });
  auto vocabulary = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  vocabulary->mask_size_ = mask_size;
  vocabulary->sorted_index_of_id_.assign(mask_size, -1);
  vocabulary->byte_tokens_.assign(vocabulary->mask_words(), 0);
  vocabulary->offsets_.push_back(0);
  std::string_view previous;
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t id = order[k];
    const std::string& bytes = *token_bytes[id];
    const size_t limit = std::min(previous.size(), bytes.size());
    size_t common = 0;
    while (common < limit && previous[common] == bytes[common]) ++common;
    vocabulary->common_prefix_.push_back(static_cast<int32_t>(common));
    vocabulary->ids_.push_back(id);
    vocabulary->sorted_index_of_id_[id] = static_cast<int32_t>(k);
    vocabulary->byte_tokens_[id / 32] |= uint32_t{1} << (id % 32);
    vocabulary->blob_ += bytes;
    vocabulary->offsets_.push_back(static_cast<uint32_t>(vocabulary->blob_.size()));
    previous = std::string_view();  // blob_ may move; re-read below.
    previous = vocabulary->bytes(static_cast<int>(k));
  }
  return std::shared_ptr<const TokenVocabulary>(std::move(vocabulary));
}

int TokenVocabulary::PrefixEnd(int k, int length) const {
  const std::string_view prefix = bytes(k).substr(0, length);
  // Sorted: the tokens after k that start with `prefix` come first.
  int low = k + 1, high = size();
  while (low < high) {
    const int mid = low + (high - low) / 2;
    if (bytes(mid).substr(0, length) == prefix) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

}  // namespace pagoda::constraints
