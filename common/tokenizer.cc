#include "common/tokenizer.h"

#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/sentencepiece_adapter.h"

namespace pagoda {
namespace {

constexpr char kTokenizerFile[] = "tokenizer.model";

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceAdapter> processor)
      : processor_(std::move(processor)) {}

  absl::StatusOr<std::vector<int>> Encode(const std::string& text) const override {
    std::vector<int> ids;
    const std::string error = processor_->Encode(text, &ids);
    if (!error.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer encode: ", error));
    }
    return ids;
  }

  absl::StatusOr<std::string> Decode(const std::vector<int>& ids) const override {
    const int size = processor_->piece_size();
    for (int id : ids) {
      // sentencepiece checks ids too, but reports them less clearly.
      if (id < 0 || id >= size) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer decode: token id ", id, " is outside [0, ", size, ")"));
      }
    }
    std::string text;
    const std::string error = processor_->Decode(ids, &text);
    if (!error.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer decode: ", error));
    }
    return text;
  }

  int vocab_size() const override { return processor_->piece_size(); }

 private:
  const std::unique_ptr<SentencePieceAdapter> processor_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_dir) {
  const std::filesystem::path path = std::filesystem::path(model_dir) / kTokenizerFile;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return std::unique_ptr<Tokenizer>();
  auto processor = std::make_unique<SentencePieceAdapter>();
  const std::string load_error = processor->Load(path.string());
  if (!load_error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": cannot load sentencepiece model: ", load_error));
  }
  return std::unique_ptr<Tokenizer>(std::make_unique<SentencePieceTokenizer>(std::move(processor)));
}

}  // namespace pagoda
