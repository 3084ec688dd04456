#ifndef PAGODA_COMMON_TOKENIZER_H_
#define PAGODA_COMMON_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda {

// Text <-> token ids through a sentencepiece `tokenizer.model`.
// Thread-safe after Load.
class Tokenizer {
 public:
  // Loads `model_dir`/tokenizer.model. Returns nullptr (not an error) when the
  // directory has no tokenizer.model: such a model takes token-id prompts only.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_dir);
  virtual ~Tokenizer() = default;
  // Encodes without BOS; callers add it when the model wants one.
  virtual absl::StatusOr<std::vector<int>> Encode(const std::string& text) const = 0;
  virtual absl::StatusOr<std::string> Decode(const std::vector<int>& ids) const = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace pagoda

#endif  // PAGODA_COMMON_TOKENIZER_H_
