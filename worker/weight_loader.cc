#include "worker/weight_loader.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tensor_slice.h"
#include "worker/quant/quant_readers.h"
#include "worker/quant/quantized_weight.h"

namespace pagoda::worker {

std::unique_ptr<Buffer> WeightLoader::ToBackend(const std::vector<float>& host) {
  auto buffer = backend_->Allocate(DType::kF32, host.size());
  backend_->UploadBytes(host.data(), buffer->raw(), host.size() * sizeof(float));
  return buffer;
}

absl::StatusOr<std::unique_ptr<Buffer>> WeightLoader::LoadF32(const std::string& name,
                                                              const std::vector<int64_t>& shape,
                                                              const WeightSlice& rows) {
  auto host = SliceRowsF32(store_, name, shape, rows.begin, rows.end);
  if (!host.ok()) return host.status();
  return ToBackend(*host);
}

absl::StatusOr<std::unique_ptr<Buffer>> WeightLoader::LoadStacked(const std::vector<Part>& parts) {
  std::vector<HostWeight> views;
  size_t elements = 0;
  for (const Part& part : parts) {
    auto view = ReadWeightSlice(store_, part.name, part.shape, part.slice);
    if (!view.ok()) return view.status();
    elements += view->nbytes / DTypeSize(view->dtype);
    views.push_back(*std::move(view));
  }
  const DType target = dtype_.value_or(views.front().dtype);
  auto buffer = backend_->Allocate(target, elements);
  char* dst = static_cast<char*>(buffer->raw());
  std::vector<float> widened;
  for (const HostWeight& view : views) {
    const size_t n = view.nbytes / DTypeSize(view.dtype);
    if (view.dtype == target) {
      backend_->UploadBytes(view.data, dst, view.nbytes);
    } else {
      widened.resize(n);
      ConvertToFloat(view.dtype, view.data, n, widened.data());
      std::vector<char> converted(n * DTypeSize(target));
      ConvertFromFloat(target, widened.data(), n, converted.data());
      backend_->UploadBytes(converted.data(), dst, converted.size());
    }
    dst += n * DTypeSize(target);
    // Copied: the mapped pages need not stay resident (see tensor_slice.h).
    if (view.owned.empty()) ReleaseMappedPages(view.data, view.nbytes);
  }
  return buffer;
}

absl::StatusOr<std::unique_ptr<Buffer>> WeightLoader::LoadF32Stacked(
    const std::vector<Part>& parts) {
  std::vector<float> stacked;
  for (const Part& part : parts) {
    auto host = SliceRowsF32(store_, part.name, part.shape, part.slice.begin, part.slice.end);
    if (!host.ok()) return host.status();
    stacked.insert(stacked.end(), host->begin(), host->end());
  }
  return ToBackend(stacked);
}

absl::StatusOr<std::unique_ptr<Linear>> WeightLoader::LoadLinear(const std::vector<Module>& modules,
                                                                 bool with_bias, DType y_dtype) {
  // A row slice of the weight is a slice of the bias; a column slice (row
  // parallel) leaves the bias whole.
  std::vector<Part> bias_parts;
  int64_t out = 0;
  for (const Module& module : modules) {
    const bool rows = module.slice.axis == WeightSlice::Axis::kRows;
    bias_parts.push_back({module.name + ".bias",
                          {module.out},
                          rows ? module.slice : WeightSlice::Rows(0, module.out)});
    out += rows ? module.slice.end - module.slice.begin : module.out;
  }
  const int64_t in = modules.front().slice.axis == WeightSlice::Axis::kColumns
                         ? modules.front().slice.end - modules.front().slice.begin
                         : modules.front().in;
  if (quant_.Quantizes(modules.front().name)) {
    std::vector<float> bias;
    if (with_bias) {
      for (const Part& part : bias_parts) {
        absl::StatusOr<std::vector<float>> host =
            SliceRowsF32(store_, part.name, part.shape, part.slice.begin, part.slice.end);
        if (!host.ok()) return host.status();
        bias.insert(bias.end(), host->begin(), host->end());
      }
    }
    return LoadQuantizedLinear(modules, std::move(bias));
  }
  std::vector<Part> parts;
  for (const Module& module : modules) {
    if (quant_.quantized() && store_.Has(module.name + ".qweight")) {
      return absl::InvalidArgumentError(
          absl::StrCat(module.name, ": quantized in the checkpoint but listed as not converted"));
    }
    parts.push_back({module.name + ".weight", {module.out, module.in}, module.slice});
  }
  std::unique_ptr<Buffer> weight;
  PAGODA_ASSIGN_OR_RETURN(weight, LoadStacked(parts));
  std::unique_ptr<Buffer> bias;
  if (with_bias) PAGODA_ASSIGN_OR_RETURN(bias, LoadF32Stacked(bias_parts));
  return std::make_unique<DenseLinear>(backend_, std::move(weight), out, in, std::move(bias),
                                       y_dtype);
}

absl::StatusOr<std::unique_ptr<Linear>> WeightLoader::LoadQuantizedLinear(
    const std::vector<Module>& modules, std::vector<float> bias) {
  std::vector<QuantizedWeight> parts;
  for (const Module& module : modules) {
    if (!quant_.Quantizes(module.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          module.name, ": not quantized, but run as one product with ", modules.front().name));
    }
    absl::StatusOr<QuantizedWeight> whole =
        ReadQuantizedWeight(store_, quant_, module.name, module.out, module.in);
    if (!whole.ok()) return whole.status();
    switch (module.slice.axis) {
      case WeightSlice::Axis::kWhole:
        parts.push_back(*std::move(whole));
        break;
      case WeightSlice::Axis::kRows:
        parts.push_back(SliceOutputs(*whole, module.slice.begin, module.slice.end));
        break;
      case WeightSlice::Axis::kColumns: {
        absl::StatusOr<QuantizedWeight> slice =
            SliceInputs(*whole, module.slice.begin, module.slice.end);
        if (!slice.ok()) return slice.status();
        parts.push_back(*std::move(slice));
        break;
      }
    }
  }
  absl::StatusOr<QuantizedWeight> stacked = StackOutputs(std::move(parts), modules.front().name);
  if (!stacked.ok()) return stacked.status();
  stacked->bias = std::move(bias);
  return backend_->CreateQuantizedLinear(*std::move(stacked));
}

}  // namespace pagoda::worker
