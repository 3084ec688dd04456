#ifndef PAGODA_TEXT_UTF8_H_
#define PAGODA_TEXT_UTF8_H_

// UTF-8 validation and lossy decoding, as Hugging Face's tokenizers treat
// ill-formed bytes.

#include <cstddef>
#include <string>
#include <string_view>

namespace pagoda {

// The Unicode replacement character U+FFFD in UTF-8.
inline constexpr std::string_view kUtf8ReplacementCharacter = "\xEF\xBF\xBD";

// True if `text` is well-formed UTF-8 (no overlongs, surrogates or values
// above U+10FFFF).
bool IsValidUtf8(std::string_view text);

// `bytes` with every ill-formed subsequence replaced by U+FFFD, one per
// maximal subpart, the practice that both Rust's from_utf8_lossy and the
// WHATWG TextDecoder follow (so decoded text matches Hugging Face's).
std::string Utf8Lossy(std::string_view bytes);

// Length in bytes of the well-formed UTF-8 character starting at `text[pos]`,
// or 0 if none starts there.
size_t Utf8CharLength(std::string_view text, size_t pos);

// Length of the longest prefix of `text` that does not end inside an
// incomplete (but so far well-formed) UTF-8 character: what a stream may emit
// now without splitting a character that later bytes could complete.
size_t CompleteUtf8PrefixLength(std::string_view text);

}  // namespace pagoda

#endif  // PAGODA_TEXT_UTF8_H_
