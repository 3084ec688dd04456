#ifndef PAGODA_SCHEDULER_CONSTRAINTS_TOKEN_VOCABULARY_H_
#define PAGODA_SCHEDULER_CONSTRAINTS_TOKEN_VOCABULARY_H_

// The model's tokens as the byte strings they add to a text, sorted, so
// that tokens sharing a prefix are neighbours: a walk over them in this order
// is a walk over the token trie (the bytes two neighbours share are matched
// once, and a prefix the grammar refuses skips every token under it). Built
// once at server start and shared by every grammar.
//
// Immutable after Create; thread-safe.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::constraints {

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes token `id` adds inside a text (no first-token
  // space stripping); nullopt or empty for tokens no constrained text holds
  // (special tokens: EOS, BOS, chat markers), which a mask never allows.
  // `mask_size` is the model's vocabulary, which may exceed the
  // tokenizer's: masks have a bit per model token, and those past the
  // tokenizer's stay 0. INVALID_ARGUMENT if mask_size < token_bytes.size()
  // or no token has bytes.
  static absl::StatusOr<std::shared_ptr<const TokenVocabulary>> Create(
      std::vector<std::optional<std::string>> token_bytes, int mask_size);

  int mask_size() const { return mask_size_; }
  // 32-bit words in a mask: bit (id % 32) of word (id / 32) is token id.
  int mask_words() const { return (mask_size_ + 31) / 32; }
  // Tokens with bytes, in sorted order.
  int size() const { return static_cast<int>(ids_.size()); }
  std::string_view bytes(int k) const {
    return std::string_view(blob_).substr(offsets_[k], offsets_[k + 1] - offsets_[k]);
  }
  int32_t token_id(int k) const { return ids_[k]; }
  // Bytes that sorted token k shares with sorted token k - 1 (0 for k = 0).
  int common_prefix(int k) const { return common_prefix_[k]; }
  // The first sorted index after k whose bytes do not start with the first
  // `length` bytes of sorted token k. REQUIRES: length <= bytes(k).size().
  int PrefixEnd(int k, int length) const;
  // The bytes of token `id` (empty for a token without bytes).
  std::string_view BytesOfId(int32_t id) const {
    return sorted_index_of_id_[id] < 0 ? std::string_view() : bytes(sorted_index_of_id_[id]);
  }
  // A mask of every token with bytes.
  const std::vector<uint32_t>& byte_tokens() const { return byte_tokens_; }

 private:
  TokenVocabulary() = default;
  int mask_size_ = 0;
  std::string blob_;
  std::vector<uint32_t> offsets_;  // [size + 1] into blob_.
  std::vector<int32_t> ids_;
  std::vector<int32_t> common_prefix_;
  std::vector<int32_t> sorted_index_of_id_;  // [mask_size], -1 for no bytes.
  std::vector<uint32_t> byte_tokens_;
};

}  // namespace pagoda::constraints

#endif  // PAGODA_SCHEDULER_CONSTRAINTS_TOKEN_VOCABULARY_H_
