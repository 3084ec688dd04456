#include "worker/comm/collective_communicator.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace pagoda::worker::comm {

absl::Status ValidateCollectiveArgs(const void* data, size_t count, DType dtype, int world_size,
                                    const char* what) {
  if (count == 0) return absl::OkStatus();
  if (FindDTypeNames(dtype) == nullptr || FindDTypeNames(dtype)->kv_cache_only) {
    // Collectives sum and gather activations; a KV cache type is no operand.
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", std::string(DTypeName(dtype)), " is a KV cache type only"));
  }
  if (data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": null data with count ", count));
  }
  const size_t limit_elements = kMaxCollectiveBytes / DTypeSize(dtype) / world_size;
  if (count > limit_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", count, " elements of ", std::string(DTypeName(dtype)),
                     " over the limit of ", limit_elements, " per rank"));
  }
  return absl::OkStatus();
}

}  // namespace pagoda::worker::comm
