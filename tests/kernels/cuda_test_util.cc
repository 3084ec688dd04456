#include "tests/kernels/cuda_test_util.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>
#include <random>

namespace pagoda::kernels::testing {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  const cudaError_t err = cudaMalloc(&data_, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "cudaMalloc(%zu): %s\n", bytes, cudaGetErrorString(err));
    std::abort();
  }
}

DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }

void DeviceBuffer::Fill(uint8_t value) {
  if (cudaMemset(data_, value, bytes_) != cudaSuccess) std::abort();
}

void DeviceBuffer::Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  const cudaError_t err = cudaMemcpy(dst, src, bytes, kind);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "cudaMemcpy: %s\n", cudaGetErrorString(err));
    std::abort();
  }
}

std::vector<uint8_t> Encode(ScalarType type, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * ScalarTypeSize(type));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (type) {
      case ScalarType::kF32:
        std::memcpy(&bytes[i * 4], &values[i], 4);
        break;
      case ScalarType::kF16: {
        const __half h = __float2half_rn(values[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
        break;
      }
      case ScalarType::kBF16: {
        const __nv_bfloat16 b = __float2bfloat16_rn(values[i]);
        std::memcpy(&bytes[i * 2], &b, 2);
        break;
      }
      case ScalarType::kFp8E4M3:  // KV-cache-only: no CUDA kernel takes them yet.
      case ScalarType::kFp8E5M2:
        std::fprintf(stderr, "Encode: no CUDA kernel takes %s\n", ScalarTypeName(type));
        std::abort();
    }
  }
  return bytes;
}

std::vector<float> Decode(ScalarType type, const std::vector<uint8_t>& bytes) {
  const size_t count = bytes.size() / ScalarTypeSize(type);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    switch (type) {
      case ScalarType::kF32:
        std::memcpy(&values[i], &bytes[i * 4], 4);
        break;
      case ScalarType::kF16: {
        __half h;
        std::memcpy(&h, &bytes[i * 2], 2);
        values[i] = __half2float(h);
        break;
      }
      case ScalarType::kBF16: {
        __nv_bfloat16 b;
        std::memcpy(&b, &bytes[i * 2], 2);
        values[i] = __bfloat162float(b);
        break;
      }
      case ScalarType::kFp8E4M3:  // As in Encode.
      case ScalarType::kFp8E5M2:
        std::fprintf(stderr, "Decode: no CUDA kernel takes %s\n", ScalarTypeName(type));
        std::abort();
    }
  }
  return values;
}

std::vector<float> RoundTrip(ScalarType type, const std::vector<float>& values) {
  return Decode(type, Encode(type, values));
}

double Tolerance(ScalarType type) {
  switch (type) {
    case ScalarType::kF32:
      return 1e-5;
    case ScalarType::kF16:
      return 2e-3;
    case ScalarType::kBF16:
      return 1.6e-2;
    case ScalarType::kFp8E4M3:  // As in Encode.
    case ScalarType::kFp8E5M2:
      break;
  }
  return 0;
}

std::vector<float> RandomFloats(size_t count, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

}  // namespace pagoda::kernels::testing
