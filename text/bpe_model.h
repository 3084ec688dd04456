#ifndef PAGODA_TEXT_BPE_MODEL_H_
#define PAGODA_TEXT_BPE_MODEL_H_

// BpeModel: the byte-pair-encoding model of a Hugging Face tokenizer.json,
// merges applied to one pre-tokenized word at a time.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pagoda {

// The "BPE" model of a Hugging Face tokenizer.json: a vocabulary and ranked
// merges applied to one pre-tokenized word at a time, lowest rank first (the
// leftmost pair among equal ranks), as the tokenizers library does.
// Characters missing from the vocabulary become `<0xXX>` byte tokens when
// `byte_fallback` is on, else the unknown token (consecutive ones fused when
// `fuse_unk`), else they are dropped. Immutable and thread-safe after Create.
class BpeModel {
 public:
  // `model` is the tokenizer.json "model" object. Unsupported options
  // (dropout, subword prefixes/suffixes) are INVALID_ARGUMENT.
  static absl::StatusOr<BpeModel> Create(const nlohmann::json& model);

  // Appends the ids of `word` to `ids`.
  void Tokenize(std::string_view word, std::vector<int>* ids) const;

  // -1 if `token` is not in the vocabulary.
  int TokenToId(std::string_view token) const;
  const absl::flat_hash_map<std::string, int>& vocab() const { return vocab_; }

 private:
  struct Merge {
    int rank;
    int merged_id;
  };
  static uint64_t PairKey(int left, int right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // The initial symbols of `word`: one per character, or its byte tokens.
  void InitialSymbols(std::string_view word, std::vector<int>* symbols) const;
  void ApplyMerges(std::vector<int>* symbols) const;

  absl::flat_hash_map<std::string, int> vocab_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  int byte_token_ids_[256];  // -1 where the vocabulary lacks <0xXX>.
  int unk_id_ = -1;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace pagoda

#endif  // PAGODA_TEXT_BPE_MODEL_H_
