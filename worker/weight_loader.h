#ifndef PAGODA_WORKER_WEIGHT_LOADER_H_
#define PAGODA_WORKER_WEIGHT_LOADER_H_

// WeightLoader: moves this rank's slices of checkpoint tensors into backend
// memory for the model, and builds each projection's Linear (worker/linear.h)
// once at load: dense, or the backend's quantized Linear when the
// checkpoint's QuantConfig quantizes that module.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/safetensors.h"
#include "worker/backend.h"
#include "worker/linear.h"
#include "worker/quant/quant_config.h"
#include "worker/sharded_weights.h"

namespace pagoda::worker {

// Loads weight tensors (this rank's slices of them, see sharded_weights.h)
// into backend memory, one call per tensor, in the target dtype (or each
// tensor's stored dtype when there is none). Shapes are the checkpoint's.
class WeightLoader {
 public:
  struct Part {
    std::string name;
    std::vector<int64_t> shape;
    WeightSlice slice;
  };

  // One module of a projection (e.g. "model.layers.0.self_attn.q_proj"):
  // its full [out, in] and this rank's slice of it.
  struct Module {
    std::string name;
    int64_t out;
    int64_t in;
    WeightSlice slice;
  };

  WeightLoader(const WeightStore& store, Backend* backend, std::optional<DType> dtype,
               const QuantConfig& quant)
      : store_(store), backend_(backend), dtype_(dtype), quant_(quant) {}

  // The Linear of `modules`' rows stacked (q, k, v; gate, up), each this
  // rank's slice, writing y in `y_dtype`, with the f32 bias of their
  // ".bias" tensors when `with_bias`: dense from "<module>.weight", or the
  // backend's quantized Linear when the QuantConfig quantizes the modules
  // (all of them or none: a mixed stack is refused naming the module).
  absl::StatusOr<std::unique_ptr<Linear>> LoadLinear(const std::vector<Module>& modules,
                                                     bool with_bias, DType y_dtype);

  absl::StatusOr<std::unique_ptr<Buffer>> Load(const std::string& name,
                                               const std::vector<int64_t>& shape,
                                               WeightSlice slice = WeightSlice::Whole()) {
    return LoadStacked({{name, shape, slice}});
  }

  // Biases (elements [begin, end)): f32 whatever the checkpoint, as Linear
  // adds them in f32.
  absl::StatusOr<std::unique_ptr<Buffer>> LoadF32(const std::string& name,
                                                  const std::vector<int64_t>& shape,
                                                  const WeightSlice& rows);

  // Rows of several [rows_i, cols] slices stacked into one matrix, in the
  // first part's dtype when none is forced (parts of one layer share it).
  absl::StatusOr<std::unique_ptr<Buffer>> LoadStacked(const std::vector<Part>& parts);

  // Several biases (each this rank's elements) one after another, in f32.
  absl::StatusOr<std::unique_ptr<Buffer>> LoadF32Stacked(const std::vector<Part>& parts);

  std::unique_ptr<Buffer> ToBackend(const std::vector<float>& host);

 private:
  absl::StatusOr<std::unique_ptr<Linear>> LoadQuantizedLinear(const std::vector<Module>& modules,
                                                              std::vector<float> bias);

  const WeightStore& store_;
  Backend* backend_;
  std::optional<DType> dtype_;
  const QuantConfig& quant_;
};

}  // namespace pagoda::worker

#endif  // PAGODA_WORKER_WEIGHT_LOADER_H_
