#!/usr/bin/env bash
# The CPU worker's kernels and quantized models on CPUs this machine may not
# be, under QEMU user-mode emulation (Debian's qemu-user; QEMU 7.2's TCG has
# AVX, AVX2, FMA and F16C but no AVX-512 and no VNNI, so an AVX-512 or VNNI
# instruction reached on such a CPU is a SIGILL, not a silent pass):
#   - Haswell (AVX2, FMA, F16C): the dispatch must pick the AVX2 level and the
#     AVX2 int8 tiles without VNNI, and every kernel test, the quantized
#     Linears and the quantized checkpoints against the float64 reference
#     must pass there;
#   - Nehalem (SSE4.2, no AVX): the plain level and the int8 row layout.
# Child processes (the tests' python3 references) run natively: only the
# test binary is emulated. Timings under emulation mean nothing.
#   run_emulated_cpu_tests.sh BINARY_DIR
# Exits 77 (ctest: skipped) where qemu-x86_64 is not installed.
set -euo pipefail

bin=${1:?usage: run_emulated_cpu_tests.sh BINARY_DIR}
if ! command -v qemu-x86_64 >/dev/null 2>&1; then
  echo "qemu-x86_64 not found (Debian: qemu-user, scripts/setup.sh --tests): skipped"
  exit 77
fi

# One test binary under `-cpu MODEL`; QEMU's notes on CPUID bits its TCG
# lacks (pcid, x2apic, ...) dropped from stderr.
emulate() {
  local model=$1 binary=$2
  shift 2
  echo "== qemu-x86_64 -cpu $model $binary $*"
  qemu-x86_64 -cpu "$model" "$bin/$binary" "$@" \
    2> >(grep -v "TCG doesn't support requested feature" >&2)
}

export PAGODA_EXPECT_SIMD_LEVEL=avx2 PAGODA_EXPECT_INT8_KERNELS="avx2 vpmaddubsw"
emulate Haswell worker_cpu_simd_test
emulate Haswell worker_cpu_quant_linear_test
emulate Haswell worker_cpu_w8a8_linear_test
emulate Haswell worker_cpu_linear_test \
  --gtest_filter='*RowsOfOneTileEqualOneRowStepsBitForBit*:*EmbeddingAndRmsNorm*'
emulate Haswell worker_cpu_attention_test \
  --gtest_filter='*EveryLevelMatchesReference*:*Fp8CacheWithScalesMatchesReferenceAtEveryLevel*'
emulate Haswell quantized_reference_test --gtest_filter='*LogitsAndGreedyTokens*'

export PAGODA_EXPECT_SIMD_LEVEL=plain PAGODA_EXPECT_INT8_KERNELS=rows
emulate Nehalem worker_cpu_simd_test
emulate Nehalem worker_cpu_quant_linear_test
emulate Nehalem worker_cpu_w8a8_linear_test
emulate Nehalem quantized_reference_test \
  --gtest_filter='*LogitsAndGreedyTokens*/awq_g32:*/gptq_int8_asym:*/ct_w8a8_int8:*/fp8_dynamic'
echo "emulated CPUs: all passed"
