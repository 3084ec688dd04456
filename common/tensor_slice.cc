#include "common/tensor_slice.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace pagoda {
namespace {

// The tensor, after checking its full shape and the range along `axis`.
absl::StatusOr<TensorView> CheckedView(const WeightStore& store, const std::string& name,
                                       const std::vector<int64_t>& expected_shape, size_t axis,
                                       int64_t begin, int64_t end) {
  absl::StatusOr<TensorView> view = store.GetFloat(name, expected_shape);
  if (!view.ok()) return view.status();
  if (axis >= view->shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight \"", name, "\" of shape ", ShapeString(view->shape), " has no axis ", axis));
  }
  const int64_t extent = view->shape[axis];
  if (begin < 0 || begin >= end || end > extent) {
    return absl::InvalidArgumentError(absl::StrCat("weight \"", name, "\": slice [", begin, ", ",
                                                   end, ") of axis ", axis, " outside [0, ", extent,
                                                   ") or empty"));
  }
  return view;
}

std::vector<float> ToF32(DType dtype, const void* data, size_t count) {
  std::vector<float> values(count);
  ConvertToFloat(dtype, data, count, values.data());
  return values;
}

}  // namespace

absl::StatusOr<TensorView> SliceRows(const WeightStore& store, const std::string& name,
                                     const std::vector<int64_t>& expected_shape, int64_t begin,
                                     int64_t end) {
  if (expected_shape.size() != 1 && expected_shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("SliceRows of \"", name, "\": only 1-D and 2-D tensors"));
  }
  absl::StatusOr<TensorView> view = CheckedView(store, name, expected_shape, 0, begin, end);
  if (!view.ok()) return view.status();
  const int64_t row_elements = view->shape.size() == 2 ? view->shape[1] : 1;
  const size_t row_bytes = static_cast<size_t>(row_elements) * DTypeSize(view->dtype);
  TensorView slice;
  slice.dtype = view->dtype;
  slice.shape = view->shape;
  slice.shape[0] = end - begin;
  slice.data = static_cast<const uint8_t*>(view->data) + static_cast<size_t>(begin) * row_bytes;
  slice.nbytes = static_cast<size_t>(end - begin) * row_bytes;
  return slice;
}

absl::StatusOr<OwnedTensor> SliceColumns(const WeightStore& store, const std::string& name,
                                         const std::vector<int64_t>& expected_shape, int64_t begin,
                                         int64_t end) {
  if (expected_shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("SliceColumns of \"", name, "\": only 2-D tensors"));
  }
  absl::StatusOr<TensorView> view = CheckedView(store, name, expected_shape, 1, begin, end);
  if (!view.ok()) return view.status();
  const size_t element = DTypeSize(view->dtype);
  const size_t rows = static_cast<size_t>(view->shape[0]);
  const size_t row_bytes = static_cast<size_t>(view->shape[1]) * element;
  const size_t slice_bytes = static_cast<size_t>(end - begin) * element;
  OwnedTensor slice{view->dtype, {view->shape[0], end - begin}, {}};
  slice.bytes.resize(rows * slice_bytes);
  const auto* source = static_cast<const uint8_t*>(view->data) + begin * element;
  for (size_t row = 0; row < rows; ++row) {
    std::memcpy(slice.bytes.data() + row * slice_bytes, source + row * row_bytes, slice_bytes);
  }
  // Each row's slice shares pages with the other ranks' columns: let go of
  // the whole tensor's pages now that the columns are copied.
  ReleaseMappedPages(view->data, view->nbytes);
  return slice;
}

void ReleaseMappedPages(const void* data, size_t nbytes) {
  if (data == nullptr || nbytes == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + nbytes + page - 1) & ~(page - 1);
  // Advice only: on failure the pages merely stay resident until unmapped.
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

absl::StatusOr<std::vector<float>> SliceRowsF32(const WeightStore& store, const std::string& name,
                                                const std::vector<int64_t>& expected_shape,
                                                int64_t begin, int64_t end) {
  absl::StatusOr<TensorView> slice = SliceRows(store, name, expected_shape, begin, end);
  if (!slice.ok()) return slice.status();
  return ToF32(slice->dtype, slice->data, static_cast<size_t>(slice->num_elements()));
}

absl::StatusOr<std::vector<float>> SliceColumnsF32(const WeightStore& store,
                                                   const std::string& name,
                                                   const std::vector<int64_t>& expected_shape,
                                                   int64_t begin, int64_t end) {
  absl::StatusOr<OwnedTensor> slice = SliceColumns(store, name, expected_shape, begin, end);
  if (!slice.ok()) return slice.status();
  return ToF32(slice->dtype, slice->bytes.data(), slice->bytes.size() / DTypeSize(slice->dtype));
}

}  // namespace pagoda
