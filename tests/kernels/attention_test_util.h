// Helpers for the attention kernel tests: an owning device
// buffer, bf16/f16 encoding on the host, random paged-cache problems (a
// bf16/f16 or an FP8 E4M3 cache) and the comparison against the float64
// reference.
#ifndef PAGODA_TESTS_KERNELS_ATTENTION_TEST_UTIL_H_
#define PAGODA_TESTS_KERNELS_ATTENTION_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention/attention_reference.h"
#include "kernels/kv_cache_storage.h"
#include "kernels/scalar_type.h"

namespace pagoda::kernels {

// Owns one cudaMalloc allocation. Not copyable. Not thread-safe.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Copies `bytes` from host; returns the CUDA error.
  cudaError_t Upload(const void* host, size_t bytes);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// 16-bit encodings of bf16/f16 values (round to nearest even) and back.
uint16_t EncodeElement(float value, ScalarType dtype);
float DecodeElement(uint16_t bits, ScalarType dtype);
std::vector<uint16_t> Encode(const std::vector<float>& values, ScalarType dtype);
std::vector<float> Decode(const std::vector<uint16_t>& bits, ScalarType dtype);
// Rounds each value to the nearest representable one in `dtype`.
void RoundInPlace(std::vector<float>& values, ScalarType dtype);

// How a random problem's block tables are drawn.
enum class BlockTableKind {
  kShuffled,  // every logical block a distinct physical block, random order
  kRepeated,  // physical blocks drawn with repetition (shared prefixes, reuse)
};

struct AttentionProblemSpec {
  ScalarType dtype = ScalarType::kBF16;
  int num_q_heads = 8;
  int num_kv_heads = 8;
  int head_dim = 128;
  int block_size = 16;
  BlockTableKind table_kind = BlockTableKind::kShuffled;
  std::vector<int32_t> context_lens;  // per sequence
  std::vector<int32_t> query_counts;  // per sequence (decode: all 1)
  float query_magnitude = 3.0f;       // q uniform in [-m, m]; K, V in [-1, 1]
  // kFp8E4M3 (kFp8E5M2): the device cache holds E4M3(x / k_scale) (E5M2)
  // (and v_scale) of the
  // dtype-rounded K and V (common/fp8.h, the CPU worker's rule), and the
  // reference's cache their exact values code * scale (in f32: exact for
  // power-of-two scales, within 2^-24 relative otherwise).
  KvCacheStorage kv_storage = KvCacheStorage::kDType;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// A random problem, host side (values already rounded to the dtype).
struct AttentionProblem {
  AttentionProblemSpec spec;
  int max_blocks_per_seq = 0;
  HostPagedCache cache;                   // the values attention reads (FP8: dequantized)
  std::vector<uint8_t> k_codes, v_codes;  // FP8 only: the device cache's bytes
  std::vector<std::vector<int32_t>> block_tables;
  std::vector<int32_t> query_start;  // prefix sums of query_counts
  std::vector<float> q;              // [total_queries, num_q_heads, head_dim]
  double softmax_scale = 0.0;
};

AttentionProblem MakeAttentionProblem(const AttentionProblemSpec& spec, std::mt19937& rng);

// Device copies of a problem's inputs, plus a poisoned (NaN) output buffer.
struct DeviceAttentionProblem {
  DeviceBuffer q, k_cache, v_cache, block_tables, context_lens, query_start, out;
};
// Returns the first CUDA error, if any.
cudaError_t UploadAttentionProblem(const AttentionProblem& problem, DeviceAttentionProblem& device);

// Error of a kernel output against the float64 reference.
struct Comparison {
  double max_abs_error = 0.0;
  double max_allowed_violation = 0.0;  // max(|err| - allowed); <= 0 passes
  double relative_l2_error = 0.0;      // ||out - ref|| / ||ref||
  size_t non_finite = 0;               // NaN/Inf (unwritten or broken) elements
  size_t worst_index = 0;
  std::string Describe() const;
};
// Allowed error per element: atol (1e-3 at unit value scale) plus one rounding
// of the output to `dtype` (relative 2^-8 for bf16, 2^-11 for f16).
Comparison CompareWithReference(const std::vector<float>& out, const std::vector<double>& ref,
                                ScalarType dtype, double atol = 1e-3);

// Reads a device output of `count` dtype elements back as floats.
cudaError_t DownloadOutput(const DeviceBuffer& out, size_t count, ScalarType dtype,
                           std::vector<float>& values);

// Copies the 16-bit q [tokens, row] of `q` into `strided`, whose token rows
// are row + padding elements apart with the padding poisoned (all-ones bits:
// NaN): queries read through a stride, as from a fused QKV product's rows.
cudaError_t StridedQueryCopy(const DeviceBuffer& q, size_t tokens, size_t row, size_t padding,
                             DeviceBuffer& strided);

}  // namespace pagoda::kernels

#endif  // PAGODA_TESTS_KERNELS_ATTENTION_TEST_UTIL_H_
