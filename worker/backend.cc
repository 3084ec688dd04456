#include "worker/backend.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "worker/linear.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {
namespace {

// Contract violations are programming errors: report and stop.
void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "pagoda worker: contract violated: %s\n", what);
  std::abort();
}

}  // namespace

float* Buffer::data() {
  Require(dtype_ == DType::kF32, "f32 view of a non-f32 buffer");
  return static_cast<float*>(raw());
}

const float* Buffer::data() const {
  Require(dtype_ == DType::kF32, "f32 view of a non-f32 buffer");
  return static_cast<const float*>(raw());
}

Tensor Tensor::Of(const Buffer& buffer, std::initializer_list<int64_t> dims) {
  Tensor tensor;
  tensor.dtype = buffer.dtype();
  tensor.data = buffer.raw();
  Require(dims.size() <= tensor.shape.size(), "tensor rank above 4");
  for (int64_t d : dims) tensor.shape[tensor.rank++] = d;
  Require(static_cast<size_t>(tensor.num_elements()) == buffer.size(),
          "tensor shape does not match its buffer");
  return tensor;
}

Tensor Tensor::Rows(int64_t first, int64_t count) const {
  Require(rank == 2, "Rows of a tensor that is not a matrix");
  Require(first >= 0 && count >= 0 && first + count <= shape[0], "Rows out of range");
  Tensor rows = *this;
  rows.shape[0] = count;
  rows.data = static_cast<const char*>(data) + first * shape[1] * DTypeSize(dtype);
  return rows;
}

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

void Workspace::Reserve(size_t bytes, int regions) {
  const size_t needed = bytes + static_cast<size_t>(regions) * kAlignment;
  if (capacity() >= needed) return;
  buffer_.reset();  // Free before allocating the bigger one.
  buffer_ = backend_->Allocate(DType::kF32, (needed + sizeof(float) - 1) / sizeof(float));
  used_ = 0;
}

void* Workspace::Take(size_t bytes) {
  Require(buffer_ != nullptr, "workspace taken before it was reserved");
  char* base = static_cast<char*>(buffer_->raw());
  // Align each region's start (cache lines, AVX-512 and 16-byte vector loads).
  const uintptr_t address = reinterpret_cast<uintptr_t>(base + used_);
  const size_t pad = (kAlignment - address % kAlignment) % kAlignment;
  Require(used_ + pad + bytes <= capacity(), "workspace reservation exceeded");
  char* region = base + used_ + pad;
  used_ += pad + bytes;
  return region;
}

absl::StatusOr<std::unique_ptr<worker::Linear>> Backend::CreateQuantizedLinear(
    QuantizedWeight weight) {
  const std::string kind = weight.code_type == CodeType::kFloat8E4M3
                               ? std::string(" FP8")
                               : absl::StrCat(" int", weight.bits);
  return absl::UnimplementedError(
      absl::StrCat(weight.name, ": ", weight.format.empty() ? "quantized" : weight.format, kind,
                   " weights are not served on this device yet (the CPU worker serves them)"));
}

}  // namespace pagoda::worker
