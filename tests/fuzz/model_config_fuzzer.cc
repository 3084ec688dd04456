// config.json and generation_config.json of a model directory, as the server
// and every worker read them at start-up (LoadModelConfig) and as
// --generation-config auto reads the sampling defaults (LoadSamplingDefaults).
// Input: config.json's bytes, then optionally a NUL byte and
// generation_config.json's.
#include <cmath>
#include <filesystem>

#include "common/model_config.h"
#include "common/sampling_limits.h"
#include "scheduler/api/generation_config.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using pagoda::fuzz::Check;

void CheckConfig(const pagoda::ModelConfig& config) {
  Check(config.vocab_size > 0 && config.vocab_size <= pagoda::kMaxSamplingVocab, "vocab_size");
  Check(config.hidden_size > 0 && config.intermediate_size > 0 && config.num_hidden_layers > 0,
        "sizes positive");
  Check(config.num_attention_heads > 0 && config.num_key_value_heads > 0 &&
            config.num_attention_heads % config.num_key_value_heads == 0,
        "heads divide");
  Check(config.head_dim > 0 && config.head_dim % 2 == 0, "head_dim even");
  Check(config.max_position_embeddings > 0, "max_position_embeddings");
  Check(config.rms_norm_eps > 0 && std::isfinite(config.rms_norm_eps), "rms_norm_eps");
  Check(config.rope_theta > 0 && std::isfinite(config.rope_theta), "rope_theta");
  Check(config.bos_token_id < config.vocab_size, "bos below vocab");
  for (int id : config.eos_token_ids) Check(id >= 0 && id < config.vocab_size, "eos in vocab");
}

void CheckDefaults(const pagoda::scheduler::SamplingDefaults& defaults) {
  auto in = [](const std::optional<float>& v, float low, float high) {
    return !v.has_value() || (std::isfinite(*v) && *v >= low && *v <= high);
  };
  Check(in(defaults.temperature, 0, 1e6), "temperature");
  Check(in(defaults.top_p, 0, 1), "top_p");
  Check(in(defaults.min_p, 0, 1), "min_p");
  Check(in(defaults.repetition_penalty, 0, pagoda::kMaxRepetitionPenalty), "repetition_penalty");
  Check(!defaults.top_k.has_value() ||
            (*defaults.top_k >= 0 && *defaults.top_k <= pagoda::kMaxSamplingVocab),
        "top_k");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = pagoda::fuzz::ScratchDir("model_config");
  const std::string_view input = pagoda::fuzz::AsText(data, size);
  const size_t split = input.find('\0');
  pagoda::fuzz::WriteFile(dir + "/config.json", input.substr(0, split));
  const std::string generation = dir + "/generation_config.json";
  if (split == std::string_view::npos) {
    std::filesystem::remove(generation);
  } else {
    pagoda::fuzz::WriteFile(generation, input.substr(split + 1));
  }
  if (absl::StatusOr<pagoda::ModelConfig> config = pagoda::LoadModelConfig(dir); config.ok()) {
    CheckConfig(*config);
  }
  if (auto defaults = pagoda::scheduler::LoadSamplingDefaults("auto", dir); defaults.ok()) {
    CheckDefaults(*defaults);
  }
  return 0;
}
