#ifndef PAGODA_TEXT_HF_TOKENIZER_H_
#define PAGODA_TEXT_HF_TOKENIZER_H_

// HfTokenizer: a Hugging Face tokenizer.json tokenizer (added tokens,
// normalizers, pre-tokenizers, BPE, decoders) as the tokenizers library runs it.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "text/tokenizer.h"

namespace pagoda {

// A Hugging Face `tokenizer.json` tokenizer with a BPE model: byte-level BPE
// (Llama 3, Qwen2/3: regex Split + ByteLevel) and SentencePiece-style BPE
// (Llama 2, Mistral: Prepend/Replace normalizers or Metaspace, byte
// fallback). Encoding follows the tokenizers library: added tokens are
// matched first on the raw text (leftmost, longest) and never split; the
// text between them is normalized, pre-tokenized and run through BPE.
// Decoding runs the file's decoder chain; ill-formed UTF-8 becomes U+FFFD.
// Immutable and thread-safe after Load.
class HfTokenizer : public Tokenizer {
 public:
  // Parses the contents of a tokenizer.json. Parts outside the supported
  // subset are INVALID_ARGUMENT naming the part.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(const std::string& json_text);
  // Reads `path` (a tokenizer.json) and parses it.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromFile(const std::string& path);
  ~HfTokenizer() override;

  // INVALID_ARGUMENT if `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int>> Encode(const std::string& text) const override;
  // Keeps special tokens, as the library's decode(skip_special_tokens=false).
  absl::StatusOr<std::string> Decode(const std::vector<int>& ids) const override;
  int vocab_size() const override;
  // From the post_processor: the special token that TemplateProcessing puts
  // before a single sequence (Llama 2's <s>, Llama 3.1's
  // <|begin_of_text|>), else -1 (byte-level files such as Qwen's add none).
  std::optional<int> bos_token_to_add() const override;
  std::string kind() const override { return "tokenizer.json (BPE)"; }
  // Vocabulary tokens through the decoder chain's per-token steps, added
  // tokens as their content; special added tokens nullopt. UNIMPLEMENTED for
  // a file without a decoder (its tokens are joined by spaces).
  absl::StatusOr<std::vector<std::optional<std::string>>> TokenBytes() const override;
  // The id of a vocabulary or added token spelled `token`, or -1.
  int TokenToId(const std::string& token) const;

  // The parsed file; opaque outside hf_tokenizer.cc.
  struct Parts;

 private:
  explicit HfTokenizer(std::unique_ptr<Parts> parts);
  // FromJson's work once the text parsed as a JSON object; throws
  // nlohmann::json::exception for a value of the wrong type.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromParsedJson(const nlohmann::json& root);
  // Encodes text that holds no added token.
  void EncodeSection(const std::string& text, bool first_section, std::vector<int>* ids) const;

  std::unique_ptr<Parts> parts_;
};

}  // namespace pagoda

#endif  // PAGODA_TEXT_HF_TOKENIZER_H_
