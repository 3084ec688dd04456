#include "tests/support/lora_test_adapters.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/support/tiny_model.h"

namespace pagoda::testing {

const std::vector<TestAdapterSpec>& TestAdapters() {
  static const std::vector<TestAdapterSpec>* const specs = new std::vector<TestAdapterSpec>{
      {"all_r8_bf16", 8, "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "bf16", false,
       ""},
      {"attn_r4_f32_rslora", 4, "q_proj,k_proj,v_proj,o_proj", "f32", true, ""},
      {"mlp_r13_f16", 13, "gate_proj,up_proj,down_proj,q_proj,embed_tokens,lm_head", "f16", false,
       std::string(kTestTrainableTokens)},
  };
  return *specs;
}

const std::vector<TestAdapterSpec>& TestAdaptersOfProjections() {
  static const std::vector<TestAdapterSpec>* const specs = [] {
    auto* out = new std::vector<TestAdapterSpec>(TestAdapters());
    for (TestAdapterSpec& spec : *out) {
      std::vector<std::string> kept;
      for (absl::string_view target : absl::StrSplit(spec.targets, ',')) {
        if (target != "embed_tokens" && target != "lm_head") kept.emplace_back(target);
      }
      spec.targets = absl::StrJoin(kept, ",");
      spec.trainable_tokens.clear();
    }
    return out;
  }();
  return *specs;
}

absl::Status WriteTestAdapter(const std::string& base, const std::string& out,
                              const TestAdapterSpec& spec) {
  const std::string command =
      absl::StrCat(PythonBinary(), " tests/reference/lora_reference.py make --base ", base,
                   " --out ", out, " --rank ", spec.rank, " --alpha 6 --targets ", spec.targets,
                   " --dtype ", spec.dtype, spec.rslora ? " --rslora" : "", " --seed ", spec.rank,
                   spec.trainable_tokens.empty()
                       ? ""
                       : absl::StrCat(" --trainable-tokens '", spec.trainable_tokens, "'"));
  if (std::system(command.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("failed: ", command));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::testing
