#include "text/utf8.h"

namespace pagoda {
namespace {

// Allowed range of the second byte after `lead` (Unicode Table 3-7); the
// later continuation bytes are always 0x80..0xBF.
bool SecondByteOk(unsigned char lead, unsigned char byte) {
  if (lead == 0xE0) return byte >= 0xA0 && byte <= 0xBF;
  if (lead == 0xED) return byte >= 0x80 && byte <= 0x9F;
  if (lead == 0xF0) return byte >= 0x90 && byte <= 0xBF;
  if (lead == 0xF4) return byte >= 0x80 && byte <= 0x8F;
  return byte >= 0x80 && byte <= 0xBF;
}

// Bytes the character led by `lead` has in all; 0 for a byte that cannot lead.
int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// How many bytes from `pos` form a well-formed prefix of one character
// (up to its full length); 0 if text[pos] cannot lead one.
int WellFormedPrefix(std::string_view text, size_t pos, int* full_length) {
  const unsigned char lead = static_cast<unsigned char>(text[pos]);
  *full_length = SequenceLength(lead);
  if (*full_length == 0) return 0;
  int have = 1;
  while (have < *full_length && pos + have < text.size()) {
    const unsigned char byte = static_cast<unsigned char>(text[pos + have]);
    const bool ok = have == 1 ? SecondByteOk(lead, byte) : (byte >= 0x80 && byte <= 0xBF);
    if (!ok) break;
    ++have;
  }
  return have;
}

}  // namespace

size_t Utf8CharLength(std::string_view text, size_t pos) {
  int full = 0;
  const int have = WellFormedPrefix(text, pos, &full);
  return have == full ? have : 0;
}

bool IsValidUtf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = Utf8CharLength(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    int full = 0;
    const int have = WellFormedPrefix(bytes, pos, &full);
    if (have > 0 && have == full) {
      out.append(bytes.substr(pos, have));
      pos += have;
    } else {
      // A maximal subpart (or a lone bad byte) becomes one U+FFFD.
      out.append(kUtf8ReplacementCharacter);
      pos += have > 0 ? have : 1;
    }
  }
  return out;
}

size_t CompleteUtf8PrefixLength(std::string_view text) {
  // A character is at most 4 bytes: only the last 3 can start an
  // incomplete one.
  const size_t first = text.size() > 3 ? text.size() - 3 : 0;
  for (size_t pos = first; pos < text.size(); ++pos) {
    int full = 0;
    const int have = WellFormedPrefix(text, pos, &full);
    if (have > 0 && have < full && pos + have == text.size()) return pos;
  }
  return text.size();
}

}  // namespace pagoda
