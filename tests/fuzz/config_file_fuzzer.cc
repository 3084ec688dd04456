// vLLM's --config FILE.yaml as pagoda-server reads it: the YAML document
// typed as PyYAML would (ParseYamlDocument, over libyaml), then the
// command-line words of its keys (ConfigFileWords). Input: the file's bytes.
#include "common/config_file.h"
#include "common/yaml_json.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = pagoda::fuzz::AsText(data, size);
  absl::StatusOr<nlohmann::ordered_json> parsed = pagoda::ParseYamlDocument(input);
  if (!parsed.ok()) {
    pagoda::fuzz::Check(parsed.status().code() == absl::StatusCode::kInvalidArgument, "code");
    return 0;
  }
  absl::StatusOr<std::vector<std::string>> words = pagoda::ConfigFileWords(*parsed, "f.yaml");
  if (words.ok()) {
    for (const std::string& word : *words) {
      pagoda::fuzz::Check(word.size() <= 4 * size + 64, "a word no longer than its source");
    }
  }
  return 0;
}
