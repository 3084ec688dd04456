#ifndef PAGODA_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define PAGODA_TESTS_FUZZ_FUZZ_SUPPORT_H_

// Helpers shared by the fuzz targets of this folder.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace pagoda::fuzz {

// A fresh directory of this process for the files a target writes (removed
// at exit); on /dev/shm when it exists, so writing an input costs no disk.
std::string ScratchDir(const std::string& name);

// Replaces `path` with `bytes`; aborts on failure (the harness is broken).
void WriteFile(const std::string& path, std::string_view bytes);

// Fails the run with `what` when `condition` is false: an invariant of
// accepted input that the code under test broke.
inline void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
  }
}

// A byte-level BPE tokenizer.json (GPT-2's 256 byte tokens, a few merges,
// and the added tokens <|begin_of_text|> = bos, <|eot_id|> = eos), so that
// any UTF-8 text encodes. kFixtureVocab ids in all.
std::string ByteLevelTokenizerJson();
inline constexpr int kFixtureBosId = 262;
inline constexpr int kFixtureEosId = 263;
inline constexpr int kFixtureVocab = 264;

// The input as text.
inline std::string_view AsText(const uint8_t* data, size_t size) {
  return std::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace pagoda::fuzz

#endif  // PAGODA_TESTS_FUZZ_FUZZ_SUPPORT_H_
