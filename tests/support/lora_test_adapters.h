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
};

// Ranks 8, 4 (rsLoRA) and 13; bf16, f32 and f16; every projection, the
// attention ones, and the MLP's plus q_proj, embed_tokens and lm_head.
const std::vector<TestAdapterSpec>& TestAdapters();
// The same without embed_tokens and lm_head (which only the CPU worker
// applies): what a CUDA worker's slots take.
const std::vector<TestAdapterSpec>& TestAdaptersOfProjections();

// Writes `spec` (lora_alpha 6) as a PEFT directory at `out` for the model at
// `base`; runs PythonBinary() from the repository root, as ctest does.
absl::Status WriteTestAdapter(const std::string& base, const std::string& out,
                              const TestAdapterSpec& spec);

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_SUPPORT_LORA_TEST_ADAPTERS_H_
