#include "text/tokenizer.h"

#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "text/hf_tokenizer.h"
#include "text/sentencepiece_adapter.h"
#include "text/sentencepiece_decode_table.h"

namespace pagoda {
namespace {

constexpr char kTokenizerFile[] = "tokenizer.model";
constexpr char kHfTokenizerFile[] = "tokenizer.json";

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceAdapter> processor)
      : processor_(std::move(processor)),
        decode_table_(SentencePieceDecodeTable::Build(*processor_)) {}

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
    if (decode_table_.has_value() && decode_table_->TryDecode(ids, &text)) return text;
    const std::string error = processor_->Decode(ids, &text);
    if (!error.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer decode: ", error));
    }
    return text;
  }

  int vocab_size() const override { return processor_->piece_size(); }
  std::string kind() const override { return "tokenizer.model (sentencepiece)"; }

  // "\u2581" is a space; byte pieces <0xXX> their byte; control, unknown
  // and unused pieces nullopt.
  absl::StatusOr<std::vector<std::optional<std::string>>> TokenBytes() const override {
    std::vector<std::optional<std::string>> out(processor_->piece_size());
    for (int id = 0; id < processor_->piece_size(); ++id) {
      int kind = 0;
      const std::string piece = processor_->Piece(id, &kind);
      if (kind == 1) continue;
      if (kind == 2) {
        out[id] = std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
        continue;
      }
      out[id] = SpaceSymbolsToSpaces(piece);
    }
    return out;
  }

 private:
  const std::unique_ptr<SentencePieceAdapter> processor_;
  const std::optional<SentencePieceDecodeTable> decode_table_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_dir) {
  std::error_code error;
  const std::filesystem::path hf_path = std::filesystem::path(model_dir) / kHfTokenizerFile;
  if (std::filesystem::exists(hf_path, error)) {
    absl::StatusOr<std::unique_ptr<HfTokenizer>> hf = HfTokenizer::FromFile(hf_path.string());
    if (!hf.ok()) return hf.status();
    return std::unique_ptr<Tokenizer>(*std::move(hf));
  }
  const std::filesystem::path path = std::filesystem::path(model_dir) / kTokenizerFile;
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
