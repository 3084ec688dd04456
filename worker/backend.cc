#include "worker/backend.h"

#include <cstdio>
#include <cstdlib>

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

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

void Workspace::Reserve(size_t floats, int regions) {
  const size_t needed = floats + static_cast<size_t>(regions) * kAlignFloats;
  if (capacity() >= needed) return;
  buffer_.reset();  // Free before allocating the bigger one.
  buffer_ = backend_->Allocate(DType::kF32, needed);
  used_ = 0;
}

float* Workspace::Take(size_t floats) {
  float* base = buffer_->data();
  // Align each region's start to 64 bytes (cache lines, AVX-512 loads).
  const uintptr_t address = reinterpret_cast<uintptr_t>(base + used_);
  const size_t pad = ((64 - address % 64) % 64) / sizeof(float);
  Require(used_ + pad + floats <= capacity(), "workspace reservation exceeded");
  float* region = base + used_ + pad;
  used_ += pad + floats;
  return region;
}

}  // namespace pagoda::worker
