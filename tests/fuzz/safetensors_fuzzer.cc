// A model directory's weights as the workers map them (WeightStore::Open):
// the safetensors header (8-byte length, JSON, offsets, dtypes, shapes) and
// the sharded index. Input: a mode byte, then the bytes of
//   mode even: model.safetensors;
//   mode odd:  model.safetensors.index.json, beside two valid shards
//              (a.safetensors with "x", b.safetensors with "y" and "z").
// Every tensor of an accepted directory is then read as Get and GetF32 do.
#include <cstring>
#include <filesystem>

#include "common/dtype.h"
#include "common/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using pagoda::fuzz::Check;

// A safetensors file of f32 tensors named `names`, each of shape [2].
std::string Shard(const std::vector<std::string>& names) {
  std::string header = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) header += ",";
    header += "\"" + names[i] + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" +
              std::to_string(8 * i) + "," + std::to_string(8 * i + 8) + "]}";
  }
  header += "}";
  std::string file(8, '\0');
  uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>(length >> (8 * i));
  file += header;
  file += std::string(8 * names.size(), '\x3f');
  return file;
}

void ReadEverything(const pagoda::WeightStore& store) {
  for (const std::string& name : store.Names()) {
    absl::StatusOr<pagoda::TensorView> view = store.Get(name);
    Check(view.ok(), "a listed tensor is found");
    const int64_t elements = view->num_elements();
    Check(elements >= 0, "element count non-negative");
    Check(view->nbytes == static_cast<size_t>(elements) * pagoda::DTypeSize(view->dtype),
          "bytes = elements x dtype size");
    if (elements <= (int64_t{1} << 16)) {
      absl::StatusOr<std::vector<float>> values = store.GetF32(name, view->shape);
      Check(values.ok() && values->size() == static_cast<size_t>(elements), "GetF32 reads it");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string single = pagoda::fuzz::ScratchDir("safetensors_single");
  static const std::string sharded = [] {
    const std::string dir = pagoda::fuzz::ScratchDir("safetensors_sharded");
    pagoda::fuzz::WriteFile(dir + "/a.safetensors", Shard({"x"}));
    pagoda::fuzz::WriteFile(dir + "/b.safetensors", Shard({"y", "z"}));
    return dir;
  }();
  if (size == 0) return 0;
  const std::string_view bytes = pagoda::fuzz::AsText(data + 1, size - 1);
  const bool index = data[0] % 2 == 1;
  const std::string& dir = index ? sharded : single;
  pagoda::fuzz::WriteFile(dir + (index ? "/model.safetensors.index.json" : "/model.safetensors"),
                          bytes);
  if (absl::StatusOr<std::unique_ptr<pagoda::WeightStore>> store = pagoda::WeightStore::Open(dir);
      store.ok()) {
    ReadEverything(**store);
  }
  return 0;
}
