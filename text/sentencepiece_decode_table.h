#ifndef PAGODA_TEXT_SENTENCEPIECE_DECODE_TABLE_H_
#define PAGODA_TEXT_SENTENCEPIECE_DECODE_TABLE_H_

// Decoding of sentencepiece ids by concatenating each piece's text, built
// once per model. Why by hand: the library builds a SentencePieceText
// (a protobuf) and several status objects on every Decode, and the server's
// detokenizer decodes a window of a few ids twice for every generated token:
// with the library alone that was 43 % of the engine thread at batch 250
// (perf, a tiny model). Only windows of normal pieces whose first piece
// decodes to more than spaces take this path; byte, control, unknown and
// unused pieces, and a window that opens with spaces (the library's rules
// for leading spaces depend on the normalizer), go to the library. Build
// checks the table against the library and gives none when they disagree.

#include <optional>
#include <string>
#include <vector>

#include "text/sentencepiece_adapter.h"

namespace pagoda {

// A piece's text: U+2581 (sentencepiece's space symbol) as a space.
std::string SpaceSymbolsToSpaces(const std::string& piece);

class SentencePieceDecodeTable {
 public:
  // nullopt when some window of normal pieces decodes otherwise through the
  // library (then every decode should go there).
  static std::optional<SentencePieceDecodeTable> Build(const SentencePieceAdapter& processor);

  // The library's text of `ids` when the table can give it; false (text
  // untouched) when the library must decode them. REQUIRES: every id in
  // [0, vocab size).
  bool TryDecode(const std::vector<int>& ids, std::string* text) const;

 private:
  enum class Use : unsigned char { kLibrary, kInside, kAnywhere };
  std::vector<std::string> surface_;  // Normal pieces' text; empty for others.
  // The piece decoded alone, for a window it opens (kAnywhere only).
  std::vector<std::string> opening_;
  std::vector<Use> use_;
};

}  // namespace pagoda

#endif  // PAGODA_TEXT_SENTENCEPIECE_DECODE_TABLE_H_
