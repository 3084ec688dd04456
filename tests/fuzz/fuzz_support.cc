#include "tests/fuzz/fuzz_support.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "text/byte_level.h"

namespace pagoda::fuzz {
namespace {

std::string* scratch_root = nullptr;

void RemoveScratch() {
  std::error_code ignored;
  if (scratch_root != nullptr) std::filesystem::remove_all(*scratch_root, ignored);
}

}  // namespace

std::string ScratchDir(const std::string& name) {
  if (scratch_root == nullptr) {
    std::error_code error;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", error)
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    scratch_root = new std::string((base / ("pagoda_fuzz_" + std::to_string(getpid()))).string());
    std::atexit(RemoveScratch);
  }
  const std::string dir = *scratch_root + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  Check(out.good(), "the harness could not write its scratch file");
}

std::string ByteLevelTokenizerJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int byte = 0; byte < 256; ++byte) {
    vocab[BytesToByteLevel(std::string(1, static_cast<char>(byte)))] = byte;
  }
  const std::string space = BytesToByteLevel(" ");
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {space, "t"}, {space + "t", "he"}, {"i", "n"}, {"e", "r"}, {space, "a"}};
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [left, right] : merges) {
    vocab[left + right] = static_cast<int>(vocab.size());
    merge_list.push_back(left + " " + right);
  }
  nlohmann::json tokenizer = {
      {"added_tokens",
       {{{"id", kFixtureBosId}, {"content", "<|begin_of_text|>"}, {"special", true}},
        {{"id", kFixtureEosId}, {"content", "<|eot_id|>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  return tokenizer.dump();
}

}  // namespace pagoda::fuzz
