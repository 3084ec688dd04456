#ifndef PAGODA_TEXT_HF_TEXT_STEPS_H_
#define PAGODA_TEXT_HF_TEXT_STEPS_H_

// The text-processing steps of a Hugging Face tokenizer.json around its BPE
// model: normalizers, pre-tokenizers and decoders, parsed from their JSON
// objects. Each supports the subset that Llama 2/3, Mistral and Qwen2/3 files
// use; any other type is refused at load with a message naming it, so a
// tokenizer is never silently wrong. Every step is immutable and thread-safe.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace pagoda {

// NFC/NFD/NFKC/NFKD, Prepend, Replace (string pattern) and Sequence.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // REQUIRES: `text` is valid UTF-8.
  virtual std::string Normalize(std::string text) const = 0;
};
// A null JSON value gives nullptr (no normalization).
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& spec);

// Split (regex or string, behavior Isolated), ByteLevel, Metaspace, Sequence.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits every piece of `pieces` further (and may rewrite them, as
  // ByteLevel maps bytes to printable characters). `first_section` is true
  // for the text before any added token (Metaspace's prepend_scheme "first").
  virtual void Split(std::vector<std::string>* pieces, bool first_section) const = 0;
};
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& spec);

// ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and Sequence:
// each maps the token strings to new strings, as the library's decode_chain.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> DecodeChain(std::vector<std::string> tokens) const = 0;
  // What this step does to one token in the middle of a text, bytes kept as
  // they are (no lossy UTF-8): the token's own bytes. `fused` is set once a
  // step has joined the tokens (Fuse, ByteLevel): steps after it see the
  // whole text, so only what they do at its start (Strip) is skipped.
  virtual std::string TokenBytes(std::string token, bool* fused) const = 0;
};
absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& spec);

}  // namespace pagoda

#endif  // PAGODA_TEXT_HF_TEXT_STEPS_H_
