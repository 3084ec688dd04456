#ifndef PAGODA_TEXT_BYTE_LEVEL_H_
#define PAGODA_TEXT_BYTE_LEVEL_H_

// GPT-2's byte-level alphabet (Llama 3, Qwen): bytes to printable characters
// and back.

#include <optional>
#include <string>
#include <string_view>

namespace pagoda {

// GPT-2's byte-level alphabet, used by byte-level BPE (Llama 3, Qwen): each
// of the 256 byte values stands for one printable character, so that any
// byte string is a string of vocabulary characters. Bytes '!'..'~',
// 0xA1..0xAC and 0xAE..0xFF stand for themselves (as code points); the other
// 68 bytes take code points 256, 257, ... in byte order.

// The UTF-8 of the characters standing for each byte of `bytes`.
std::string BytesToByteLevel(std::string_view bytes);

// The inverse: the bytes that the characters of `text` stand for, or nullopt
// if `text` holds a character outside the alphabet.
std::optional<std::string> ByteLevelToBytes(std::string_view text);

}  // namespace pagoda

#endif  // PAGODA_TEXT_BYTE_LEVEL_H_
