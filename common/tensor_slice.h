#ifndef PAGODA_COMMON_TENSOR_SLICE_H_
#define PAGODA_COMMON_TENSOR_SLICE_H_

// Shape-checked slices of memory-mapped tensors, so a tensor-parallel rank
// reads only its shard's bytes of the checkpoint.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors.h"

// Parts of a memory-mapped tensor, for tensor-parallel loading: a rank reads
// only the bytes of its shard, so the pages of the other ranks' shards are
// never faulted in and its resident memory holds its shard, not the model.
//
// Slices are row-major like the tensors. Every function checks the tensor's
// full shape against `expected_shape` first (INVALID_ARGUMENT naming the
// tensor and both shapes), then the range: 0 <= begin < end <= extent
// (INVALID_ARGUMENT naming the tensor, the range and the extent).
namespace pagoda {

// Rows [begin, end) of a 2-D tensor, or elements [begin, end) of a 1-D one
// (biases): contiguous, so a view into the mapping without a copy. Valid
// while the WeightStore lives.
absl::StatusOr<TensorView> SliceRows(const WeightStore& store, const std::string& name,
                                     const std::vector<int64_t>& expected_shape, int64_t begin,
                                     int64_t end);

// Columns [begin, end) of a 2-D tensor [rows, cols]: strided, so copied into
// a dense [rows, end - begin] buffer in the tensor's own dtype. Only the
// bytes of those columns are read.
struct OwnedTensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
absl::StatusOr<OwnedTensor> SliceColumns(const WeightStore& store, const std::string& name,
                                         const std::vector<int64_t>& expected_shape, int64_t begin,
                                         int64_t end);

// Drops this process's mapping of the pages spanning [data, data + nbytes)
// of a WeightStore (madvise MADV_DONTNEED): the bytes stay readable (a later
// read faults them in again from the page cache) but no longer count in this
// process's resident memory. Loaders call it once a tensor is copied, so a
// rank's peak memory is its shard plus one tensor, not its shard twice.
// Pages shared with neighbouring tensors are released too, harmlessly.
void ReleaseMappedPages(const void* data, size_t nbytes);

// The same slices converted to f32 (the CPU backend's compute type).
absl::StatusOr<std::vector<float>> SliceRowsF32(const WeightStore& store, const std::string& name,
                                                const std::vector<int64_t>& expected_shape,
                                                int64_t begin, int64_t end);
absl::StatusOr<std::vector<float>> SliceColumnsF32(const WeightStore& store,
                                                   const std::string& name,
                                                   const std::vector<int64_t>& expected_shape,
                                                   int64_t begin, int64_t end);

}  // namespace pagoda

#endif  // PAGODA_COMMON_TENSOR_SLICE_H_
