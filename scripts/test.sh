#!/usr/bin/env bash
# The test command: installs what the build needs, builds everything (the CUDA
# kernels too when nvcc is present) and runs every test with ctest; then the
# sanitizer part (scripts/sanitizer_tests.sh): every fuzzer for 20 s and a
# subset of the tests under ASan+UBSan, and the threaded ones under TSan, each
# in its own build folder (build-asan, build-tsan).
#   BUILD_DIR=build  JOBS=$(nproc)  CTEST_ARGS="-R numerics"  scripts/test.sh
#   PAGODA_SKIP_SANITIZERS=1 scripts/test.sh   # the main suite alone
#   PAGODA_IMAGE_TEST=0 scripts/test.sh        # without the `image` label (the
#     container image built and run; skipped anyway when no Docker daemon answers)
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage prints the wall time so far and the CPU time (user, system) of
# everything it ran so far, so a slow CI run shows where the time went.
stage() {
  local cpu_file
  cpu_file=$(mktemp)
  times > "$cpu_file"  # In this shell: a subshell's `times` would count nothing.
  echo "== test.sh: $1 done at ${SECONDS} s wall, $(tail -1 "$cpu_file") CPU"
  rm -f "$cpu_file"
}

bash scripts/setup.sh --tests
stage setup
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

# A unity build (16 sources a unit), as the sanitizer builds are: each unit
# parses the heavy headers (gRPC, protobuf, Abseil, JSON) once for all its
# sources, and a file-local name defined twice in one library fails here,
# first, rather than in the sanitizer stage.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16
cmake --build "$BUILD_DIR" -j "$JOBS"
stage build
# Two tests at a time, the real-process tests under tests/ too, but those
# that time failure detection alone: pagoda_serial_tests in
# cmake/PagodaTest.cmake.
IMAGE_ARGS=()
if [ "${PAGODA_IMAGE_TEST:-}" = 0 ]; then IMAGE_ARGS=(-LE image); fi
ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure --timeout 600 "${IMAGE_ARGS[@]}" ${CTEST_ARGS:-}
stage tests
if [ -z "${PAGODA_SKIP_SANITIZERS:-}" ]; then
  bash scripts/sanitizer_tests.sh asan
  stage asan
  bash scripts/sanitizer_tests.sh tsan
  stage tsan
fi
