// A model's tokenizer.json as the server loads it (HfTokenizer::FromJson:
// BPE vocabulary and merges, added tokens, normalizers, pre-tokenizers,
// decoders, post-processor), then encoding and decoding with what loaded.
// Input: the file's bytes. The text encoded is a fixed set of samples and
// the input's first bytes; the ids decoded are every id below 512, each
// alone and all together, and whatever the samples encoded to.
#include <algorithm>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "text/hf_tokenizer.h"

namespace {

using pagoda::fuzz::Check;

constexpr const char* kSamples[] = {
    "",
    " ",
    "Hello, world!",
    "  two  spaces\tand\ttabs\n\nnew lines",
    "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 "
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
    "<s>[INST] hi [/INST]</s><|begin_of_text|><|eot_id|><|im_start|>",
    "12345 67.89 it's we'll I'M",
    "\xE2\x96\x81\xC4\xA0 \xEF\xBF\xBD"};
constexpr size_t kMaxInputText = 512;
constexpr int kMaxDecodedId = 512;

void EncodeAndDecode(const pagoda::HfTokenizer& tokenizer, const std::string& text) {
  absl::StatusOr<std::vector<int>> ids = tokenizer.Encode(text);
  if (!ids.ok()) return;
  for (int id : *ids) Check(id >= 0 && id < tokenizer.vocab_size(), "encoded id in vocabulary");
  tokenizer.Decode(*ids).IgnoreError();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = pagoda::fuzz::AsText(data, size);
  absl::StatusOr<std::unique_ptr<pagoda::HfTokenizer>> loaded =
      pagoda::HfTokenizer::FromJson(std::string(input));
  if (!loaded.ok()) return 0;
  const pagoda::HfTokenizer& tokenizer = **loaded;
  Check(tokenizer.vocab_size() > 0, "a loaded tokenizer has a vocabulary");
  if (std::optional<int> bos = tokenizer.bos_token_to_add(); bos.has_value() && *bos >= 0) {
    Check(*bos < tokenizer.vocab_size(), "bos in vocabulary");
  }
  for (const char* sample : kSamples) EncodeAndDecode(tokenizer, sample);
  EncodeAndDecode(tokenizer, std::string(input.substr(0, kMaxInputText)));
  std::vector<int> all;
  for (int id = 0; id < std::min(tokenizer.vocab_size(), kMaxDecodedId); ++id) {
    tokenizer.Decode({id}).IgnoreError();
    all.push_back(id);
  }
  tokenizer.Decode(all).IgnoreError();
  tokenizer.Decode({-1, tokenizer.vocab_size()}).IgnoreError();
  return 0;
}
