#ifndef PAGODA_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
#define PAGODA_TESTS_SUPPORT_SAFETENSORS_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"

namespace pagoda::testing {

// One tensor to write: `raw` holds the little-endian element bytes, and its
// size should be product(shape) * DTypeSize(dtype) (not checked, so tests can
// write deliberately inconsistent files).
struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string raw;
};

// Helpers to build `raw` from values.
std::string F32Bytes(const std::vector<float>& values);
std::string F16Bytes(const std::vector<float>& values);   // Rounded to nearest even.
std::string BF16Bytes(const std::vector<float>& values);  // Rounded to nearest even.

// Writes a safetensors file: tensors laid out back to back in the given order.
absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors);

// Writes `contents` to `path`, replacing it.
absl::Status WriteFile(const std::string& path, const std::string& contents);

// Creates a fresh, empty directory under the temp dir (TEST_TMPDIR or /tmp)
// whose name starts with `prefix`. Dies on failure. The caller removes it.
std::string MakeTempDir(const std::string& prefix);

}  // namespace pagoda::testing

#endif  // PAGODA_TESTS_SUPPORT_SAFETENSORS_WRITER_H_
