#ifndef PAGODA_TESTS_SUPPORT_LORA_TEST_ADAPTERS_H_
#define PAGODA_TESTS_SUPPORT_LORA_TEST_ADAPTERS_H_

// The random PEFT adapters the LoRA tests share (the CPU worker, the engine,
// the numerics and the CUDA worker check the same three against the float64
// merged-weights reference), and writing one with the reference's own maker
// (tests/reference/lora_reference.py make).

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace pagoda::testing {

struct TestAdapterSpec {
  std::string name;     // Its directory's name.
  int rank;             // Also its random seed.
  std::string targets;  // Comma-separated modules.
  std::string dtype;    // f32, bf16 or f16.
  bool rslora;
  // lora_reference.py make's --trainable-tokens: "" for none.
  std::string trainable_tokens;
};

// The third adapter's trainable tokens (ids of a 40-token vocabulary): the
// embedding's and the head's own, which need --max-lora-trainable-tokens 4.
inline constexpr char kTestTrainableTokens[] = "embed_tokens:3,9,17,26;lm_head:26,5,17";
inline constexpr int kTestMaxTrainableTokens = 4;

// Ranks 8, 4 (rsLoRA) and 13; bf16, f32 and f16; every projection, the
// attention ones, and the MLP's plus q_proj, embed_tokens and lm_head (and
// trainable tokens of both).
const std::vector<TestAdapterSpec>& TestAdapters();
// The same without embed_tokens, lm_head and trainable tokens (which only
// the CPU worker applies): what a CUDA worker's slots take.
const std::vector<TestAdapterSpec>& TestAdaptersOfProjections();

// Writes `spec` (lora_alpha 6) as a PEFT directory at `out` for the model at
// `base`; runs PythonBinary() from the repository root, as ctest does.
absl::Status WriteTestAdapter(const std::string& base, const std::string& out,
                              const TestAdapterSpec& spec);

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_SUPPORT_LORA_TEST_ADAPTERS_H_
