#include "text/byte_level.h"

#include <array>

#include "text/utf8.h"

namespace pagoda {
namespace {

struct Alphabet {
  std::array<std::string, 256> byte_to_text;
  std::array<int, 324> code_point_to_byte;  // -1 outside the alphabet.
};

bool StandsForItself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

std::string EncodeCodePoint(int code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else {  // The alphabet stays below U+0800.
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
  return out;
}

const Alphabet& GetAlphabet() {
  static const Alphabet* alphabet = [] {
    auto* out = new Alphabet;
    out->code_point_to_byte.fill(-1);
    int next_extra = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const int code_point = StandsForItself(byte) ? byte : next_extra++;
      out->byte_to_text[byte] = EncodeCodePoint(code_point);
      out->code_point_to_byte[code_point] = byte;
    }
    return out;
  }();
  return *alphabet;
}

}  // namespace

std::string BytesToByteLevel(std::string_view bytes) {
  const Alphabet& alphabet = GetAlphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char byte : bytes) out += alphabet.byte_to_text[static_cast<uint8_t>(byte)];
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view text) {
  const Alphabet& alphabet = GetAlphabet();
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = Utf8CharLength(text, pos);
    if (length == 0 || length > 2) return std::nullopt;
    const unsigned char lead = static_cast<unsigned char>(text[pos]);
    const int code_point =
        length == 1 ? lead
                    : ((lead & 0x1F) << 6) | (static_cast<unsigned char>(text[pos + 1]) & 0x3F);
    if (code_point >= static_cast<int>(alphabet.code_point_to_byte.size()) ||
        alphabet.code_point_to_byte[code_point] < 0) {
      return std::nullopt;
    }
    out += static_cast<char>(alphabet.code_point_to_byte[code_point]);
    pos += length;
  }
  return out;
}

}  // namespace pagoda
