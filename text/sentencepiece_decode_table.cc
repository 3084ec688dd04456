#include "text/sentencepiece_decode_table.h"

#include <cstdint>

#include "absl/strings/str_replace.h"

namespace pagoda {
namespace {

// Windows Build compares with the library, of 2 to 9 ids.
constexpr int kCheckedWindows = 512;

}  // namespace

std::string SpaceSymbolsToSpaces(const std::string& piece) {
  return absl::StrReplaceAll(piece, {{"\xE2\x96\x81", " "}});
}

std::optional<SentencePieceDecodeTable> SentencePieceDecodeTable::Build(
    const SentencePieceAdapter& processor) {
  const int size = processor.piece_size();
  SentencePieceDecodeTable table;
  table.surface_.resize(size);
  table.opening_.resize(size);
  table.use_.assign(size, Use::kLibrary);
  std::vector<int> inside, anywhere;
  for (int id = 0; id < size; ++id) {
    int kind = 0;
    const std::string piece = processor.Piece(id, &kind);
    std::string alone;
    if (kind != 0 || !processor.Decode({id}, &alone).empty()) continue;
    table.surface_[id] = SpaceSymbolsToSpaces(piece);
    if (alone.find_first_not_of(' ') == std::string::npos) {
      table.use_[id] = Use::kInside;
      inside.push_back(id);
    } else {
      table.use_[id] = Use::kAnywhere;
      table.opening_[id] = std::move(alone);
      anywhere.push_back(id);
    }
  }
  if (anywhere.empty()) return table;
  // Deterministic windows: an opening piece, then any normal ones.
  inside.insert(inside.end(), anywhere.begin(), anywhere.end());
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state](size_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(state >> 33) % n;
  };
  for (int w = 0; w < kCheckedWindows; ++w) {
    std::vector<int> ids = {anywhere[next(anywhere.size())]};
    const size_t length = 2 + next(8);
    while (ids.size() < length) ids.push_back(inside[next(inside.size())]);
    std::string expected, got;
    if (!processor.Decode(ids, &expected).empty() || !table.TryDecode(ids, &got) ||
        got != expected) {
      return std::nullopt;
    }
  }
  return table;
}

bool SentencePieceDecodeTable::TryDecode(const std::vector<int>& ids, std::string* text) const {
  if (ids.empty() || use_[ids[0]] != Use::kAnywhere) return false;
  size_t bytes = opening_[ids[0]].size();
  for (size_t i = 1; i < ids.size(); ++i) {
    if (use_[ids[i]] == Use::kLibrary) return false;
    bytes += surface_[ids[i]].size();
  }
  text->clear();
  text->reserve(bytes);
  text->append(opening_[ids[0]]);
  for (size_t i = 1; i < ids.size(); ++i) text->append(surface_[ids[i]]);
  return true;
}

}  // namespace pagoda
