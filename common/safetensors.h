#ifndef PAGODA_COMMON_SAFETENSORS_H_
#define PAGODA_COMMON_SAFETENSORS_H_

// Memory-mapped safetensors checkpoints: the header parsed and bounded, each
// tensor a view into the mapping (no copy), for the worker's weight loaders.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace pagoda {

// Integer element types of safetensors files: the packed codes, zero points
// and group indices of quantized checkpoints (AWQ, GPTQ, compressed-tensors),
// F8_E4M3, FP8 codes that only the FP8 reader decodes (as bytes), and BOOL
// (an EAGLE-3 head's t2d, one byte each, read by no one). Kept
// apart from DType, which lists the types arithmetic runs in.
enum class IntegerType { kNone, kI8, kU8, kI32, kI64, kF8E4M3, kBool };
size_t IntegerTypeSize(IntegerType type);
const char* IntegerTypeName(IntegerType type);  // "I32"; "" for kNone.

// "[2, 3]": how error lines print a shape.
std::string ShapeString(const std::vector<int64_t>& shape);

// A read-only view of one tensor inside a memory-mapped file. Valid while the
// WeightStore that returned it lives.
struct TensorView {
  // For an integer tensor (`integer` != kNone) dtype means nothing: only the
  // quantized formats' readers (worker/quant/) take those, and the float
  // readers (GetF32, common/tensor_slice.h) refuse them.
  DType dtype = DType::kF32;
  IntegerType integer = IntegerType::kNone;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  int64_t num_elements() const;
};

// All tensors of a Hugging Face model directory: either `model.safetensors`,
// or the shards listed in `model.safetensors.index.json`, memory-mapped.
// Open validates every header (JSON, dtypes, offsets inside the file, byte
// counts equal to shape x dtype size, no overlap) so later reads cannot crash.
// Thread-safe for reads after Open.
class WeightStore {
 public:
  static absl::StatusOr<std::unique_ptr<WeightStore>> Open(const std::string& model_dir);
  // One safetensors file by path (a PEFT adapter's adapter_model.safetensors),
  // validated as Open validates each shard.
  static absl::StatusOr<std::unique_ptr<WeightStore>> OpenFile(const std::string& path);
  ~WeightStore();
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  bool Has(const std::string& name) const;
  // NOT_FOUND naming the tensor when absent.
  absl::StatusOr<TensorView> Get(const std::string& name) const;
  // The float tensor `name`, its shape checked equal to `expected_shape`
  // (INVALID_ARGUMENT naming tensor, expected and actual shape otherwise,
  // and for an integer tensor).
  absl::StatusOr<TensorView> GetFloat(const std::string& name,
                                      const std::vector<int64_t>& expected_shape) const;
  // Reads `name` converted to f32, checking its shape equals `expected_shape`
  // (INVALID_ARGUMENT naming tensor, expected and actual shape otherwise).
  absl::StatusOr<std::vector<float>> GetF32(const std::string& name,
                                            const std::vector<int64_t>& expected_shape) const;
  std::vector<std::string> Names() const;

 private:
  struct MappedFile;
  WeightStore() = default;
  // Adds the tensors of `file`'s header, bound to its mapping. For a sharded
  // model only the names the index gives this shard (`expected`) are taken,
  // and each of them must be there.
  absl::Status AddTensors(const MappedFile& file, const std::vector<std::string>& expected,
                          bool sharded);
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace pagoda

#endif  // PAGODA_COMMON_SAFETENSORS_H_
