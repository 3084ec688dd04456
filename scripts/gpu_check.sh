#!/usr/bin/env bash
# The one script for the lent GPU machine (H200): builds the CUDA kernels,
# runs every test labelled "cuda" and every kernel benchmark, and prints a
# short table last. Meant to finish in under ~9 minutes.
#
#   scripts/gpu_check.sh            # from the repository root, on the GPU machine
#
# Environment: JOBS (16), BUILD_DIR (build-gpu), OUT (where logs go; the
# device tool's $OUT comes back to the caller), BENCH_TIMEOUT (120 s each).
#
# That machine's image has the CUDA toolkit, CMake and ninja but (as far as
# KINDS.md records) none of the Debian packages of scripts/setup.sh, and no
# network for apt. So: try setup.sh; if the full project then configures, build
# only the CUDA test and benchmark targets of it; otherwise build the kernels
# alone through scripts/gpu_check/CMakeLists.txt, which needs only CUDA and
# GoogleTest. Where GoogleTest is not installed there, carry its source:
#   here:  mkdir -p .deps && cp -r /usr/src/googletest .deps/ && echo /.deps/ >> .git/info/exclude
#   run:   carry [".deps"]
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
JOBS=${JOBS:-16}
BUILD_DIR=${BUILD_DIR:-build-gpu}
LOG_DIR=${OUT:-/tmp/pagoda-gpu-check}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}
mkdir -p "$LOG_DIR"
SUMMARY=()

# record NAME STATUS SECONDS [NOTE]
record() { SUMMARY+=("$(printf '%-28s %-8s %6ss  %s' "$1" "$2" "$3" "${4:-}")"); }

# step NAME LOGFILE TIMEOUT_S COMMAND...: runs, tees the log, records the result.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local start=$SECONDS
  echo "=== $name: $*"
  timeout "$limit" "$@" 2>&1 | tee "$LOG_DIR/$log"
  local rc=${PIPESTATUS[0]}
  local status=ok
  [ "$rc" -eq 124 ] && status=TIMEOUT
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && status="FAIL($rc)"
  record "$name" "$status" $((SECONDS - start))
  return "$rc"
}

echo "=== device"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv \
  2>&1 | tee "$LOG_DIR/device.txt"
nvcc --version 2>&1 | tail -2
cmake --version | head -1

# 1. Packages. apt usually cannot reach anything there: say what is missing.
if ! step setup setup.log 180 bash scripts/setup.sh; then
  mapfile -t packages < <(sed -n '/^PACKAGES=(/,/^)/p' scripts/setup.sh | sed '1d;$d' | tr ' ' '\n' | sed '/^$/d')
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  echo "setup: apt could not install; missing Debian packages: ${missing[*]:-none}"
  SUMMARY[-1]="${SUMMARY[-1]} missing: ${#missing[@]} packages (see log)"
fi

# 2. Configure: the full project if it can, else the kernels alone.
mode=full
if ! step configure-full configure.log 180 \
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release; then
  mode=kernels
  BUILD_DIR=${BUILD_DIR}-kernels
  gtest_args=()
  for dir in "$REPO/.deps/googletest" /usr/src/googletest; do
    if [ -f "$dir/CMakeLists.txt" ]; then
      gtest_args=(-DPAGODA_GTEST_SOURCE_DIR="$dir")
      break
    fi
  done
  if ! step configure-kernels configure_kernels.log 180 cmake -S scripts/gpu_check \
      -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${gtest_args[@]}"; then
    # The attention CMake may need more than CUDA + GoogleTest: ops alone.
    mode=ops-only
    step configure-ops-only configure_ops.log 180 cmake -S scripts/gpu_check -B "$BUILD_DIR" \
      -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_ONLY_OPS=ON "${gtest_args[@]}"
  fi
fi
echo "=== mode: $mode, build dir: $BUILD_DIR"

# 3. Build only the CUDA tests and the benchmarks (ctest names = target names).
targets=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | sed -n 's/^\([^:]*\): .*/\1/p')
has_target() { grep -qx "$1" <<<"$targets"; }
cuda_tests=()
while read -r t; do
  [ -n "$t" ] && has_target "$t" && cuda_tests+=("$t")
done < <(ctest --test-dir "$BUILD_DIR" -N -L cuda 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
bench_targets=()
for t in bench_cache_ops bench_paged_attention; do
  has_target "$t" && bench_targets+=("$t")
done
echo "=== ${#cuda_tests[@]} cuda tests: ${cuda_tests[*]}"
step build build.log 420 cmake --build "$BUILD_DIR" -j "$JOBS" \
  --target "${cuda_tests[@]}" "${bench_targets[@]}" -- -k 0

# 4. Tests (one GPU: run them one at a time).
step ctest-cuda ctest.log 300 ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure \
  --timeout 240
tests_line=$(grep -E "tests passed|tests failed" "$LOG_DIR/ctest.log" | tail -1)
SUMMARY[-1]="${SUMMARY[-1]} $tests_line"

# 5. Benchmarks.
for t in "${bench_targets[@]}"; do
  if [ -x "$BUILD_DIR/$t" ]; then
    step "$t" "$t.log" "$BENCH_TIMEOUT" "$BUILD_DIR/$t"
  else
    record "$t" missing 0 "not built"
  fi
done
if [ -f kernels/attention/bench_sdpa_baseline.py ]; then
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PYTHONUNBUFFERED=1 step bench_sdpa_baseline bench_sdpa.log "$BENCH_TIMEOUT" \
      python3 kernels/attention/bench_sdpa_baseline.py
  else
    record bench_sdpa_baseline skipped 0 "torch with CUDA not importable"
  fi
fi

# 6. The table, last, so it is what the caller sees.
echo
for t in "${bench_targets[@]}"; do
  [ -f "$LOG_DIR/$t.log" ] && { echo "--- $t (tail)"; tail -n 14 "$LOG_DIR/$t.log"; }
done
echo
echo "=== gpu_check summary (mode: $mode; logs in $LOG_DIR)"
printf '%s\n' "${SUMMARY[@]}"
grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|Not Run|SEGFAULT|Subprocess)" "$LOG_DIR/ctest.log" 2>/dev/null | head -20
failed=0
for line in "${SUMMARY[@]}"; do
  case "$line" in
    build*FAIL* | ctest-cuda*FAIL* | ctest-cuda*TIMEOUT* | bench*FAIL*) failed=1 ;;
  esac
done
exit $failed
