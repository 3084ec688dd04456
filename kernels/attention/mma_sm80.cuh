// Warp-level tensor-core primitives (sm_80+, so Hopper too): the bf16/f16
// m16n8k16 MMA with f32 accumulators, ldmatrix, and cp.async with zero fill.
// Written as inline PTX because CUDA's C++ wmma API hides the fragment
// layout, and the FlashAttention-2 scheme needs it: the scores' accumulator
// fragment is reused, element for element, as the A operand of P.V.
//
// Fragment layout of mma.m16n8k16 (g = lane / 4, t = lane % 4; each 32-bit
// register holds two consecutive-column elements, the lower column in the low
// half):
//   A (16x16, row-major): a[0] rows g,   cols 2t..2t+1   a[1] row g+8, cols 2t..
//                         a[2] row g,   cols 2t+8..      a[3] row g+8, cols 2t+8..
//   B (16x8, k x n):      b[0] k 2t..2t+1, col g         b[1] k 2t+8.., col g
//   C (16x8, f32):        c[0..1] row g, cols 2t..2t+1   c[2..3] row g+8, same cols
#ifndef PAGODA_KERNELS_ATTENTION_MMA_SM80_CUH_
#define PAGODA_KERNELS_ATTENTION_MMA_SM80_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pagoda::kernels::attention_internal {

// d += a * b on the tensor cores, T = __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                            uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T and packed into one register (lo in the low half).
template <typename T>
__device__ __forceinline__ uint32_t PackFloat2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// Four 8x8 b16 matrices from shared memory: lane l gives the address of row
// l % 8 of matrix l / 8 (16-byte aligned); r[j] then holds, in lane (g, t),
// elements [g][2t] and [g][2t+1] of stored matrix j: a B fragment half when
// the stored rows run along n (K's keys, with the head dim contiguous).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row_address) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// Four 8x8 b16 matrices from shared memory, transposed: lane l gives the
// address of row l % 8 of matrix l / 8 (16-byte aligned); r[j] then holds, in
// lane (g, t), elements [2t][g] and [2t+1][g] of stored matrix j — a B
// fragment half when the stored rows run along k.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_address) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// Asynchronous 16-byte global -> shared copy; when !valid the 16 bytes are
// zero-filled and nothing is read (src may then be any mapped address).
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until every committed cp.async group of this thread has landed.
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

}  // namespace pagoda::kernels::attention_internal

#endif  // PAGODA_KERNELS_ATTENTION_MMA_SM80_CUH_
