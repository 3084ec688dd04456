#!/usr/bin/env bash
# The test command: installs what the build needs, builds everything (the CUDA
# kernels too when nvcc is present) and runs every test with ctest; then the
# sanitizer part (scripts/sanitizer_tests.sh): every fuzzer for 15 s and a
# subset of the tests under ASan+UBSan, and the threaded ones under TSan, each
# in its own build folder (build-asan, build-tsan), built in the background
# while the main suite runs.
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
# The fuzzers' corpus replays only where the sanitizer stage, whose fuzz runs
# start from the same seeds, is skipped (tests/fuzz/CMakeLists.txt).
FUZZ_REPLAY=OFF
if [ -n "${PAGODA_SKIP_SANITIZERS:-}" ]; then FUZZ_REPLAY=ON; fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 -DPAGODA_FUZZ_REPLAY="$FUZZ_REPLAY"
cmake --build "$BUILD_DIR" -j "$JOBS"
stage build
# Two tests at a time, the real-process tests under tests/ too, but those
# that time failure detection alone: pagoda_serial_tests in
# cmake/PagodaTest.cmake.
IMAGE_ARGS=()
if [ "${PAGODA_IMAGE_TEST:-}" = 0 ]; then IMAGE_ARGS=(-LE image); fi
# The sanitizer builds start now, in the background at the lowest priority:
# the main suite mostly waits on the server and worker processes it starts
# (its tests used about a third of 2 cores' time), so the builds take what
# it leaves, and a test's process still gets the CPU at once when it needs
# it. Their logs are printed when they fail. Each runs as a job of its own
# (set -m: its own process group, so that a failing stage stops the whole of
# it), not in a session of its own: with the kernel's autogroup scheduling a
# new session (setsid) gets its own group, which shares the CPU equally with
# the suite's whatever its nice value (that made the suite's CPU-bound
# tests 3x slower).
san_pids=()
stop_sanitizer_builds() {
  for pid in "${san_pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
}
trap stop_sanitizer_builds EXIT
if [ -z "${PAGODA_SKIP_SANITIZERS:-}" ]; then
  set -m
  for mode in asan tsan; do
    nice -n 19 bash scripts/sanitizer_tests.sh "$mode" build \
      > "$BUILD_DIR/sanitizer-build-$mode.log" 2>&1 &
    san_pids+=($!)
  done
  set +m
fi
ctest --test-dir "$BUILD_DIR" -j "$JOBS" --output-on-failure --timeout 600 "${IMAGE_ARGS[@]}" ${CTEST_ARGS:-}
stage tests
wait_for_build() {  # MODE PID
  if ! wait "$2"; then
    cat "$BUILD_DIR/sanitizer-build-$1.log"
    echo "the $1 build failed (log above)"
    exit 1
  fi
  tail -1 "$BUILD_DIR/sanitizer-build-$1.log"
}
if [ -z "${PAGODA_SKIP_SANITIZERS:-}" ]; then
  wait_for_build asan "${san_pids[0]}"
  stage "asan build"
  bash scripts/sanitizer_tests.sh asan
  stage asan
  wait_for_build tsan "${san_pids[1]}"
  stage "tsan build"
  bash scripts/sanitizer_tests.sh tsan
  stage tsan
fi
