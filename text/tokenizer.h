#ifndef PAGODA_TEXT_TOKENIZER_H_
#define PAGODA_TEXT_TOKENIZER_H_

// Tokenizer: the interface the server tokenizes and detokenizes through, and
// the loader that picks tokenizer.json or tokenizer.model from a model directory.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pagoda {

// Text <-> token ids: a Hugging Face `tokenizer.json` (HfTokenizer) or a
// sentencepiece `tokenizer.model`. Thread-safe after Load.
class Tokenizer {
 public:
  // Loads `model_dir`/tokenizer.json if present (as transformers prefers the
  // fast tokenizer), else `model_dir`/tokenizer.model. Returns nullptr (not
  // an error) when the directory has neither: such a model takes token-id
  // prompts only.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_dir);
  virtual ~Tokenizer() = default;
  // Encodes without BOS; callers add it when the model wants one.
  virtual absl::StatusOr<std::vector<int>> Encode(const std::string& text) const = 0;
  virtual absl::StatusOr<std::string> Decode(const std::vector<int>& ids) const = 0;
  virtual int vocab_size() const = 0;
  // The token a text prompt starts with, when the tokenizer file says:
  // -1 for none, nullopt when it has no say (then config.json's
  // bos_token_id is used).
  virtual std::optional<int> bos_token_to_add() const { return std::nullopt; }
  // Which kind of file was loaded, for the start-up log.
  virtual std::string kind() const = 0;
  // Each token's bytes as they appear inside a text (no first-token space
  // stripping, no UTF-8 repair: a byte token is its byte), indexed by id;
  // nullopt for special and control tokens, which no text contains. What
  // constrained decoding matches grammars against. UNIMPLEMENTED when the
  // tokenizer cannot say.
  virtual absl::StatusOr<std::vector<std::optional<std::string>>> TokenBytes() const {
    return absl::UnimplementedError("this tokenizer cannot list its tokens' bytes");
  }
};

}  // namespace pagoda

#endif  // PAGODA_TEXT_TOKENIZER_H_
