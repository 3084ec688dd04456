#include "tests/support/safetensors_writer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace pagoda::testing {
namespace {

std::string HalfWidthBytes(const std::vector<float>& values, uint16_t (*convert)(float)) {
  std::string raw(values.size() * 2, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = convert(values[i]);
    raw[2 * i] = static_cast<char>(bits & 0xff);
    raw[2 * i + 1] = static_cast<char>(bits >> 8);
  }
  return raw;
}

}  // namespace

std::string F32Bytes(const std::vector<float>& values) {
  std::string raw(values.size() * sizeof(float), '\0');
  std::memcpy(raw.data(), values.data(), raw.size());  // Little-endian host assumed.
  return raw;
}

std::string F16Bytes(const std::vector<float>& values) {
  return HalfWidthBytes(values, &FloatToHalf);
}

std::string BF16Bytes(const std::vector<float>& values) {
  return HalfWidthBytes(values, &FloatToBFloat16);
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const NamedTensor& tensor : tensors) {
    header[tensor.name] = {{"dtype", std::string(DTypeName(tensor.dtype))},
                           {"shape", tensor.shape},
                           {"data_offsets", {data.size(), data.size() + tensor.raw.size()}}};
    data += tensor.raw;
  }
  std::string header_text = header.dump();
  // The format recommends 8-byte alignment of the data section; pad with spaces.
  while (header_text.size() % 8 != 0) header_text.push_back(' ');
  std::string file(8, '\0');
  uint64_t length = header_text.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  file += header_text;
  file += data;
  return WriteFile(path, file);
}

absl::Status WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/", prefix, "XXXXXX");
  char* made = mkdtemp(pattern.data());
  CHECK(made != nullptr) << "mkdtemp " << pattern << ": " << std::strerror(errno);
  return pattern;
}

}  // namespace pagoda::testing
