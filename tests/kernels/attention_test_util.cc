#include "tests/kernels/attention_test_util.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <utility>

#include "common/fp8.h"

namespace pagoda::kernels {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0 && cudaMalloc(&data_, bytes) != cudaSuccess) {
    data_ = nullptr;
    bytes_ = 0;
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

cudaError_t DeviceBuffer::Upload(const void* host, size_t bytes) {
  if (bytes > bytes_ || (bytes > 0 && data_ == nullptr)) return cudaErrorInvalidValue;
  return cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice);
}

uint16_t EncodeElement(float value, ScalarType dtype) {
  if (dtype == ScalarType::kF16) {
    __half_raw raw = __float2half_rn(value);
    return raw.x;
  }
  __nv_bfloat16_raw raw = __float2bfloat16_rn(value);
  return raw.x;
}

float DecodeElement(uint16_t bits, ScalarType dtype) {
  if (dtype == ScalarType::kF16) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return __bfloat162float(__nv_bfloat16(raw));
}

std::vector<uint16_t> Encode(const std::vector<float>& values, ScalarType dtype) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = EncodeElement(values[i], dtype);
  return bits;
}

std::vector<float> Decode(const std::vector<uint16_t>& bits, ScalarType dtype) {
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = DecodeElement(bits[i], dtype);
  return values;
}

void RoundInPlace(std::vector<float>& values, ScalarType dtype) {
  for (float& value : values) value = DecodeElement(EncodeElement(value, dtype), dtype);
}

namespace {

// An FP8 cache's codes of `values` (the CPU worker's E4M3(x / scale) or
// E5M2(x / scale)), and `values` replaced by what they read back as:
// code * scale.
void QuantizeToFp8(std::vector<float>& values, float scale, KvCacheStorage storage,
                   std::vector<uint8_t>& codes) {
  const bool e5m2 = storage == KvCacheStorage::kFp8E5M2;
  codes.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    codes[i] = e5m2 ? FloatToFp8E5M2(values[i] / scale) : FloatToFp8E4M3(values[i] / scale);
    values[i] = (e5m2 ? Fp8E5M2ToFloat(codes[i]) : Fp8E4M3ToFloat(codes[i])) * scale;
  }
}

}  // namespace

AttentionProblem MakeAttentionProblem(const AttentionProblemSpec& spec, std::mt19937& rng) {
  AttentionProblem problem;
  problem.spec = spec;
  const int num_seqs = static_cast<int>(spec.context_lens.size());
  int needed_blocks = 0;
  for (int32_t len : spec.context_lens) {
    const int blocks = (len + spec.block_size - 1) / spec.block_size;
    needed_blocks += blocks;
    problem.max_blocks_per_seq = std::max(problem.max_blocks_per_seq, blocks);
  }
  // A few spare blocks so physical ids are not simply 0..n-1.
  const int num_blocks = needed_blocks + 3;

  HostPagedCache& cache = problem.cache;
  cache.num_blocks = num_blocks;
  cache.num_kv_heads = spec.num_kv_heads;
  cache.block_size = spec.block_size;
  cache.head_dim = spec.head_dim;
  const size_t cache_elements =
      static_cast<size_t>(num_blocks) * spec.num_kv_heads * spec.block_size * spec.head_dim;
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  cache.k.resize(cache_elements);
  cache.v.resize(cache_elements);
  for (float& x : cache.k) x = unit(rng);
  for (float& x : cache.v) x = unit(rng);
  RoundInPlace(cache.k, spec.dtype);
  RoundInPlace(cache.v, spec.dtype);
  if (spec.kv_storage != KvCacheStorage::kDType) {
    QuantizeToFp8(cache.k, spec.k_scale, spec.kv_storage, problem.k_codes);
    QuantizeToFp8(cache.v, spec.v_scale, spec.kv_storage, problem.v_codes);
  }

  std::vector<int32_t> pool(num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::uniform_int_distribution<int32_t> any_block(0, num_blocks - 1);
  size_t next = 0;
  problem.block_tables.resize(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    // Unused trailing entries get an out-of-range id: a kernel that reads past
    // the context would fault or show up as wrong output.
    problem.block_tables[s].assign(problem.max_blocks_per_seq, 0x3fffffff);
    const int blocks = (spec.context_lens[s] + spec.block_size - 1) / spec.block_size;
    for (int b = 0; b < blocks; ++b) {
      problem.block_tables[s][b] =
          spec.table_kind == BlockTableKind::kShuffled ? pool[next++] : any_block(rng);
    }
  }

  problem.query_start.assign(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s) {
    problem.query_start[s + 1] = problem.query_start[s] + spec.query_counts[s];
  }
  std::uniform_real_distribution<float> query_values(-spec.query_magnitude, spec.query_magnitude);
  problem.q.resize(static_cast<size_t>(problem.query_start.back()) * spec.num_q_heads *
                   spec.head_dim);
  for (float& x : problem.q) x = query_values(rng);
  RoundInPlace(problem.q, spec.dtype);
  problem.softmax_scale = 1.0 / std::sqrt(static_cast<double>(spec.head_dim));
  return problem;
}

cudaError_t UploadAttentionProblem(const AttentionProblem& problem,
                                   DeviceAttentionProblem& device) {
  const ScalarType dtype = problem.spec.dtype;
  const std::vector<uint16_t> q = Encode(problem.q, dtype);
  const std::vector<uint16_t> k = Encode(problem.cache.k, dtype);
  const std::vector<uint16_t> v = Encode(problem.cache.v, dtype);
  std::vector<int32_t> tables;
  for (const auto& row : problem.block_tables) tables.insert(tables.end(), row.begin(), row.end());

  const bool fp8 = problem.spec.kv_storage != KvCacheStorage::kDType;
  const size_t kv_bytes = k.size() * (fp8 ? 1 : 2);
  device.q = DeviceBuffer(q.size() * 2);
  device.k_cache = DeviceBuffer(kv_bytes);
  device.v_cache = DeviceBuffer(kv_bytes);
  device.block_tables = DeviceBuffer(tables.size() * 4);
  device.context_lens = DeviceBuffer(problem.spec.context_lens.size() * 4);
  device.query_start = DeviceBuffer(problem.query_start.size() * 4);
  device.out = DeviceBuffer(q.size() * 2);
  cudaError_t errors[] = {
      device.q.Upload(q.data(), q.size() * 2),
      device.k_cache.Upload(fp8 ? static_cast<const void*>(problem.k_codes.data()) : k.data(),
                            kv_bytes),
      device.v_cache.Upload(fp8 ? static_cast<const void*>(problem.v_codes.data()) : v.data(),
                            kv_bytes),
      device.block_tables.Upload(tables.data(), tables.size() * 4),
      device.context_lens.Upload(problem.spec.context_lens.data(),
                                 problem.spec.context_lens.size() * 4),
      device.query_start.Upload(problem.query_start.data(), problem.query_start.size() * 4),
      // 0xFFFF is a NaN in both bf16 and f16: unwritten outputs cannot pass.
      device.out.get() == nullptr ? cudaErrorMemoryAllocation
                                  : cudaMemset(device.out.get(), 0xFF, device.out.bytes()),
  };
  for (cudaError_t error : errors) {
    if (error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

std::string Comparison::Describe() const {
  std::ostringstream text;
  text << "max_abs_error=" << max_abs_error << " worst_violation=" << max_allowed_violation
       << " at " << worst_index << " rel_l2=" << relative_l2_error << " non_finite=" << non_finite;
  return text.str();
}

Comparison CompareWithReference(const std::vector<float>& out, const std::vector<double>& ref,
                                ScalarType dtype, double atol) {
  Comparison result;
  result.max_allowed_violation = -std::numeric_limits<double>::infinity();
  const double output_rounding =
      dtype == ScalarType::kF16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
  double error_sq = 0.0;
  double ref_sq = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double got = i < out.size() ? out[i] : std::nan("");
    if (!std::isfinite(got)) {
      ++result.non_finite;
      continue;
    }
    const double error = std::abs(got - ref[i]);
    const double violation = error - (atol + output_rounding * std::abs(ref[i]));
    if (violation > result.max_allowed_violation) {
      result.max_allowed_violation = violation;
      result.worst_index = i;
    }
    result.max_abs_error = std::max(result.max_abs_error, error);
    error_sq += error * error;
    ref_sq += ref[i] * ref[i];
  }
  result.relative_l2_error = ref_sq > 0 ? std::sqrt(error_sq / ref_sq) : std::sqrt(error_sq);
  return result;
}

cudaError_t StridedQueryCopy(const DeviceBuffer& q, size_t tokens, size_t row, size_t padding,
                             DeviceBuffer& strided) {
  const size_t pitch = (row + padding) * 2;
  strided = DeviceBuffer(tokens * pitch);
  cudaError_t error = cudaMemset(strided.get(), 0xff, strided.bytes());
  if (error != cudaSuccess) return error;
  return cudaMemcpy2D(strided.get(), pitch, q.get(), row * 2, row * 2, tokens,
                      cudaMemcpyDeviceToDevice);
}

cudaError_t DownloadOutput(const DeviceBuffer& out, size_t count, ScalarType dtype,
                           std::vector<float>& values) {
  std::vector<uint16_t> bits(count);
  if (count * 2 > out.bytes()) return cudaErrorInvalidValue;
  cudaError_t error = cudaMemcpy(bits.data(), out.get(), count * 2, cudaMemcpyDeviceToHost);
  if (error != cudaSuccess) return error;
  values = Decode(bits, dtype);
  return cudaSuccess;
}

}  // namespace pagoda::kernels
