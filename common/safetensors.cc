#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace pagoda {

size_t IntegerTypeSize(IntegerType type) {
  switch (type) {
    case IntegerType::kI8:
    case IntegerType::kU8:
    case IntegerType::kF8E4M3:
    case IntegerType::kBool:
      return 1;
    case IntegerType::kI32:
      return 4;
    case IntegerType::kI64:
      return 8;
    case IntegerType::kNone:
      break;
  }
  return 0;
}

const char* IntegerTypeName(IntegerType type) {
  switch (type) {
    case IntegerType::kI8:
      return "I8";
    case IntegerType::kU8:
      return "U8";
    case IntegerType::kI32:
      return "I32";
    case IntegerType::kI64:
      return "I64";
    case IntegerType::kF8E4M3:
      return "F8_E4M3";
    case IntegerType::kBool:
      return "BOOL";
    case IntegerType::kNone:
      break;
  }
  return "";
}

int64_t TensorView::num_elements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

// One read-only mapping of a whole file; unmapped on destruction.
struct WeightStore::MappedFile {
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data != nullptr) munmap(const_cast<void*>(static_cast<const void*>(data)), size);
  }
  // Maps the whole file at `path`; NOT_FOUND (saying so when the file is
  // `listed_in_index`) when it cannot be opened.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Map(const std::string& path,
                                                         bool listed_in_index);

  std::string path;
  const unsigned char* data = nullptr;  // nullptr for an empty file.
  size_t size = 0;
};

namespace {

using Json = nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";
// Real headers are at most a few MB; refuse absurd ones before allocating.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

absl::Status FileError(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// The integer type a header's "dtype" names; kNone for the float names (and
// for names of neither kind, which ParseSafetensorsDType then refuses).
IntegerType ParseIntegerType(const std::string& name) {
  for (IntegerType type : {IntegerType::kI8, IntegerType::kU8, IntegerType::kI32, IntegerType::kI64,
                           IntegerType::kF8E4M3, IntegerType::kBool}) {
    if (name == IntegerTypeName(type)) return type;
  }
  return IntegerType::kNone;
}

// A tensor entry of a header, before it is bound to a mapped file.
struct HeaderEntry {
  std::string name;
  DType dtype;
  IntegerType integer;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

// Reads the "shape" of a header entry into `shape` and returns its number of
// elements. The error says only what is wrong (ParseEntry names the tensor).
absl::StatusOr<uint64_t> ParseShape(const Json& entry, uint64_t data_size,
                                    std::vector<int64_t>* shape) {
  auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    return absl::InvalidArgumentError("\"shape\" must be a list of non-negative integers");
  }
  // Stop multiplying once the product passes the data size, so it cannot overflow.
  uint64_t elements = 1;
  bool too_big = false;
  for (const Json& dim : *shape_it) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0) {
      return absl::InvalidArgumentError("\"shape\" must be a list of non-negative integers");
    }
    const uint64_t extent = static_cast<uint64_t>(dim.get<int64_t>());
    shape->push_back(static_cast<int64_t>(extent));
    if (extent != 0 && elements > data_size / extent) too_big = true;
    elements = too_big ? elements : elements * extent;
  }
  if (too_big) {
    bool has_zero = std::find(shape->begin(), shape->end(), 0) != shape->end();
    if (!has_zero) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeString(*shape), " is larger than the file"));
    }
    elements = 0;
  }
  return elements;
}

// Reads the "data_offsets" of a header entry into parsed->begin and
// parsed->end, checked against the data section's `data_size` bytes. The
// error says only what is wrong (ParseEntry names the tensor).
absl::Status ParseOffsets(const Json& entry, uint64_t data_size, HeaderEntry* parsed) {
  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return absl::InvalidArgumentError(
        "\"data_offsets\" must be [begin, end] with non-negative integers");
  }
  parsed->begin = (*offsets_it)[0].get<uint64_t>();
  parsed->end = (*offsets_it)[1].get<uint64_t>();
  if (parsed->end < parsed->begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("data_offsets end ", parsed->end, " is before begin ", parsed->begin));
  }
  if (parsed->end > data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data_offsets end ", parsed->end, " is beyond the data section (", data_size, " bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<HeaderEntry> ParseEntry(const std::string& path, const std::string& name,
                                       const Json& entry, uint64_t data_size) {
  auto tensor_error = [&](absl::string_view what) {
    return FileError(path, absl::StrCat("tensor \"", name, "\": ", what));
  };
  if (!entry.is_object()) return tensor_error("header entry must be an object");
  HeaderEntry parsed{name, DType::kF32, IntegerType::kNone, {}, 0, 0};

  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return tensor_error("\"dtype\" must be a string");
  }
  parsed.integer = ParseIntegerType(dtype_it->get<std::string>());
  if (parsed.integer == IntegerType::kNone) {
    auto dtype = ParseSafetensorsDType(dtype_it->get<std::string>());
    if (!dtype.ok()) return tensor_error(dtype.status().message());
    parsed.dtype = *dtype;
  }
  auto elements = ParseShape(entry, data_size, &parsed.shape);
  if (!elements.ok()) return tensor_error(elements.status().message());
  if (absl::Status status = ParseOffsets(entry, data_size, &parsed); !status.ok()) {
    return tensor_error(status.message());
  }
  const bool integer = parsed.integer != IntegerType::kNone;
  const uint64_t expected_bytes =
      *elements * (integer ? IntegerTypeSize(parsed.integer) : DTypeSize(parsed.dtype));
  if (parsed.end - parsed.begin != expected_bytes) {
    return tensor_error(absl::StrCat("holds ", parsed.end - parsed.begin, " bytes but shape ",
                                     ShapeString(parsed.shape), " of ",
                                     integer ? std::string(IntegerTypeName(parsed.integer))
                                             : std::string(DTypeName(parsed.dtype)),
                                     " needs ", expected_bytes));
  }
  return parsed;
}

// Parses and validates a safetensors header against the size of the mapping.
absl::StatusOr<std::vector<HeaderEntry>> ParseHeader(const std::string& path,
                                                     const unsigned char* data, size_t size,
                                                     uint64_t* data_start) {
  if (size < 8) return FileError(path, "shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | data[i];
  if (header_bytes > size - 8) {
    return FileError(path, absl::StrCat("header length ", header_bytes,
                                        " is larger than the file (", size, " bytes)"));
  }
  if (header_bytes > kMaxHeaderBytes) {
    return FileError(path, absl::StrCat("header length ", header_bytes, " is implausibly large"));
  }
  const char* header_begin = reinterpret_cast<const char*>(data + 8);
  Json header = Json::parse(header_begin, header_begin + header_bytes, /*cb=*/nullptr,
                            /*allow_exceptions=*/false);
  if (header.is_discarded()) return FileError(path, "header is not valid JSON");
  if (!header.is_object()) return FileError(path, "header must be a JSON object");

  *data_start = 8 + header_bytes;
  const uint64_t data_size = size - *data_start;
  std::vector<HeaderEntry> entries;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    auto parsed = ParseEntry(path, name, entry, data_size);
    if (!parsed.ok()) return parsed.status();
    // Integer tensors are read in place through typed pointers (the mapping
    // is page-aligned): a tensor that starts off its width's alignment is
    // refused, as no safetensors writer lays one out.
    const uint64_t width =
        parsed->integer == IntegerType::kNone ? 1 : IntegerTypeSize(parsed->integer);
    if ((*data_start + parsed->begin) % width != 0) {
      return FileError(
          path, absl::StrCat("tensor \"", name, "\": starts at byte ", *data_start + parsed->begin,
                             ", not aligned to its ", width, "-byte elements"));
    }
    entries.push_back(*std::move(parsed));
  }
  // Tensors must not share bytes: sort by begin and compare neighbours.
  std::vector<const HeaderEntry*> by_offset;
  for (const HeaderEntry& entry : entries) {
    if (entry.end > entry.begin) by_offset.push_back(&entry);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const HeaderEntry* a, const HeaderEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return FileError(path, absl::StrCat("tensors \"", by_offset[i - 1]->name, "\" and \"",
                                          by_offset[i]->name, "\" overlap"));
    }
  }
  return entries;
}

absl::StatusOr<Json> ReadIndex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::stringstream contents;
  contents << in.rdbuf();
  Json index = Json::parse(contents.str(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded()) return FileError(path, "not valid JSON");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return FileError(path, "field \"weight_map\" must be an object of tensor name -> shard file");
  }
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      return FileError(path, absl::StrCat("field \"weight_map\": tensor \"", name,
                                          "\" must map to a shard file name"));
    }
    const std::string file = shard.get<std::string>();
    // Shards live beside the index; a path elsewhere is a malformed index.
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return FileError(path, absl::StrCat("field \"weight_map\": tensor \"", name,
                                          "\" maps to bad shard name \"", file, "\""));
    }
  }
  return index;
}

// Which shard files to map, and for a sharded model (one with the index
// file at `index_path`) which tensors each must hold; a single file holds
// whatever its header lists.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> ExpectedTensorsByShard(
    const std::string& index_path, bool sharded) {
  std::map<std::string, std::vector<std::string>> expected_by_shard;
  if (!sharded) {
    expected_by_shard[kSingleFile] = {};
    return expected_by_shard;
  }
  auto index = ReadIndex(index_path);
  if (!index.ok()) return index.status();
  for (const auto& [name, shard] : (*index)["weight_map"].items()) {
    expected_by_shard[shard.get<std::string>()].push_back(name);
  }
  if (expected_by_shard.empty()) return FileError(index_path, "\"weight_map\" is empty");
  return expected_by_shard;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WeightStore::MappedFile>> WeightStore::MappedFile::Map(
    const std::string& path, bool listed_in_index) {
  auto file = std::make_unique<MappedFile>();
  file->path = path;
  int fd = ::open(file->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::string why = listed_in_index ? absl::StrCat(" (listed in ", kIndexFile, ")") : "";
    return absl::NotFoundError(
        absl::StrCat(file->path, ": cannot open", why, ": ", std::strerror(errno)));
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    return FileError(file->path, "not a regular file");
  }
  file->size = static_cast<size_t>(info.st_size);
  if (file->size > 0) {
    void* mapping = mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping == MAP_FAILED) {
      const int mmap_errno = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat(file->path, ": mmap failed: ", std::strerror(mmap_errno)));
    }
    file->data = static_cast<const unsigned char*>(mapping);
  }
  ::close(fd);  // The mapping stays valid without the descriptor.
  return file;
}

absl::Status WeightStore::AddTensors(const MappedFile& file,
                                     const std::vector<std::string>& expected, bool sharded) {
  uint64_t data_start = 0;
  auto entries = ParseHeader(file.path, file.data, file.size, &data_start);
  if (!entries.ok()) return entries.status();
  std::set<std::string> present;
  for (HeaderEntry& entry : *entries) {
    if (sharded && std::find(expected.begin(), expected.end(), entry.name) == expected.end()) {
      continue;  // The index assigns this name elsewhere (or nowhere): the index wins.
    }
    if (tensors_.count(entry.name) > 0) {
      return FileError(file.path, absl::StrCat("tensor \"", entry.name, "\" appears twice"));
    }
    TensorView view;
    view.dtype = entry.dtype;
    view.integer = entry.integer;
    view.shape = std::move(entry.shape);
    view.data = file.data + data_start + entry.begin;
    view.nbytes = static_cast<size_t>(entry.end - entry.begin);
    tensors_.emplace(entry.name, std::move(view));
    present.insert(entry.name);
  }
  for (const std::string& name : expected) {
    if (present.count(name) == 0) {
      return absl::NotFoundError(absl::StrCat(file.path, ": tensor \"", name, "\" listed in ",
                                              kIndexFile, " is missing from this shard"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WeightStore>> WeightStore::Open(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    return absl::NotFoundError(absl::StrCat("model directory ", model_dir, " does not exist"));
  }
  const std::string index_path = (dir / kIndexFile).string();
  const bool sharded = std::filesystem::exists(index_path, error);
  auto expected_by_shard = ExpectedTensorsByShard(index_path, sharded);
  if (!expected_by_shard.ok()) return expected_by_shard.status();

  std::unique_ptr<WeightStore> store(new WeightStore());
  for (const auto& [shard, expected] : *expected_by_shard) {
    auto file = MappedFile::Map((dir / shard).string(), sharded);
    if (!file.ok()) return file.status();
    if (absl::Status status = store->AddTensors(**file, expected, sharded); !status.ok()) {
      return status;
    }
    store->files_.push_back(*std::move(file));
  }
  return store;
}

absl::StatusOr<std::unique_ptr<WeightStore>> WeightStore::OpenFile(const std::string& path) {
  auto file = MappedFile::Map(path, /*listed_in_index=*/false);
  if (!file.ok()) return file.status();
  std::unique_ptr<WeightStore> store(new WeightStore());
  if (absl::Status status = store->AddTensors(**file, {}, /*sharded=*/false); !status.ok()) {
    return status;
  }
  store->files_.push_back(*std::move(file));
  return store;
}

WeightStore::~WeightStore() = default;

bool WeightStore::Has(const std::string& name) const { return tensors_.count(name) > 0; }

absl::StatusOr<TensorView> WeightStore::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("weight \"", name, "\" not found in the model"));
  }
  return it->second;
}

absl::StatusOr<TensorView> WeightStore::GetFloat(const std::string& name,
                                                 const std::vector<int64_t>& expected_shape) const {
  absl::StatusOr<TensorView> view = Get(name);
  if (!view.ok()) return view.status();
  if (view->integer != IntegerType::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight \"", name, "\" is ", IntegerTypeName(view->integer), ", expected a float tensor"));
  }
  if (view->shape != expected_shape) {
    return absl::InvalidArgumentError(absl::StrCat("weight \"", name, "\" has shape ",
                                                   ShapeString(view->shape), ", expected ",
                                                   ShapeString(expected_shape)));
  }
  return view;
}

absl::StatusOr<std::vector<float>> WeightStore::GetF32(
    const std::string& name, const std::vector<int64_t>& expected_shape) const {
  absl::StatusOr<TensorView> view = GetFloat(name, expected_shape);
  if (!view.ok()) return view.status();
  std::vector<float> values(static_cast<size_t>(view->num_elements()));
  ConvertToFloat(view->dtype, view->data, values.size(), values.data());
  return values;
}

std::vector<std::string> WeightStore::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, view] : tensors_) names.push_back(name);
  return names;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace pagoda
