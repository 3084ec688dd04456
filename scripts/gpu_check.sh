#!/usr/bin/env bash
# The one script for the lent GPU machine (H200): builds the CUDA kernels
# (kernels/ops and kernels/attention), runs every test labelled "cuda", every
# kernel benchmark (bench_* in kernels/*.cmake) and the torch SDPA baseline,
# and prints a short table last. Meant to finish in under ~9 minutes.
#
# Through the device tool. That machine has CUDA, CMake, ninja and python3 with
# torch but no Debian C++ libraries (no Abseil, gRPC or GoogleTest) and no
# network, so GoogleTest travels as source. Once, here, in the repo root:
#   mkdir -p .git/info .deps && echo /.deps/ >> .git/info/exclude
#   rm -rf .deps/googletest && cp -r /usr/src/googletest .deps/googletest
# Then:  run(command="scripts/gpu_check.sh", carry=[".deps"], timeout_s=600)
# The full project cannot configure there, so the script builds the kernels
# alone through scripts/gpu_check/CMakeLists.txt (needs only CUDA + GoogleTest).
# What comes back under $OUT: summary.txt, ctest.log, build.log, the bench
# logs and logs.tar.gz (every log).
#
# Environment:
#   JOBS (16)        build parallelism
#   BUILD_DIR        (build-gpu; the kernels-only build goes to BUILD_DIR-kernels)
#   MODE             auto (full project if it configures, else kernels) | kernels
#   BUILD_ONLY=1     configure and build only (the no-GPU dry path)
#   SETUP=1          run scripts/setup.sh (apt) first; off by default: no network there
#   BENCH_TIMEOUT    seconds per benchmark (120)
# Without a GPU (nvidia-smi fails) the tests still run (GPU ones report
# Skipped) and the benchmarks are skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
JOBS=${JOBS:-16}
BUILD_DIR=${BUILD_DIR:-build-gpu}
MODE=${MODE:-auto}
BUILD_ONLY=${BUILD_ONLY:-0}
SETUP=${SETUP:-0}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}
LOG_DIR=$(mktemp -d /tmp/pagoda-gpu-check.XXXXXX)
SUMMARY=()

# record NAME STATUS SECONDS [NOTE]
record() { SUMMARY+=("$(printf '%-26s %-9s %5ss  %s' "$1" "$2" "$3" "${4:-}")"); }
note() { SUMMARY[-1]="${SUMMARY[-1]} $*"; }

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

# Copies what the caller should see into $OUT (the device tool brings back at
# most 8 files): the summary, the main logs, and every log in one archive.
finish() {
  local rc=$1
  printf '%s\n' "${SUMMARY_TEXT[@]}" >"$LOG_DIR/summary.txt"
  if [ -n "${OUT:-}" ] && [ "$OUT" != "$LOG_DIR" ]; then
    mkdir -p "$OUT"
    for f in summary.txt ctest.log build.log bench_paged_attention.log bench_cache_ops.log \
        bench_sdpa_baseline.log; do
      [ -f "$LOG_DIR/$f" ] && cp "$LOG_DIR/$f" "$OUT/"
    done
    tar -C "$LOG_DIR" -czf "$OUT/logs.tar.gz" .
  fi
  exit "$rc"
}

echo "=== device"
have_gpu=0
if nvidia-smi >"$LOG_DIR/nvidia-smi.txt" 2>&1; then
  have_gpu=1
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
else
  echo "no GPU (nvidia-smi failed): tests will report Skipped, benchmarks are skipped"
fi
nvcc --version 2>&1 | tail -2
cmake --version | head -1

# 1. Packages (for the full project only). apt cannot reach anything on the
#    GPU machine, so only say what is missing unless SETUP=1.
if [ "$SETUP" = 1 ]; then
  step setup setup.log 180 bash scripts/setup.sh
fi
if command -v dpkg-query >/dev/null; then
  mapfile -t packages < <(sed -n '/^PACKAGES=(/,/^)/p' scripts/setup.sh | sed '1d;$d' |
    tr ' ' '\n' | sed '/^$/d')
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  echo "Debian packages of setup.sh missing: ${missing[*]:-none}"
fi

# 2. Configure: the full project if it can, else the kernels alone.
mode=full
if [ "$MODE" = kernels ] || ! step configure-full configure.log 180 \
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
  [ ${#gtest_args[@]} -eq 0 ] && echo "no GoogleTest source (.deps/googletest): needs an installed GTest"
  step configure-kernels configure_kernels.log 180 cmake -S scripts/gpu_check -B "$BUILD_DIR" \
    -G Ninja -DCMAKE_BUILD_TYPE=Release "${gtest_args[@]}" ||
    { SUMMARY_TEXT=("${SUMMARY[@]}"); printf '%s\n' "${SUMMARY[@]}"; finish 1; }
fi
echo "=== mode: $mode, build dir: $BUILD_DIR"

# 3. Build the CUDA tests and the kernel benchmarks (ctest names = target names).
targets=$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | sed -n 's/^\([^:]*\): .*/\1/p')
has_target() { grep -qx "$1" <<<"$targets"; }
cuda_tests=()
while read -r t; do
  [ -n "$t" ] && has_target "$t" && cuda_tests+=("$t")
done < <(ctest --test-dir "$BUILD_DIR" -N -L cuda 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
bench_targets=()
for t in $(sed -n 's/^add_executable(\(bench_[A-Za-z0-9_]*\).*/\1/p' kernels/*.cmake); do
  has_target "$t" && bench_targets+=("$t")
done
echo "=== ${#cuda_tests[@]} cuda tests: ${cuda_tests[*]}"
echo "=== benchmarks: ${bench_targets[*]}"
step build build.log 480 cmake --build "$BUILD_DIR" -j "$JOBS" \
  --target "${cuda_tests[@]}" "${bench_targets[@]}" -- -k 0
note "${#cuda_tests[@]} tests, ${#bench_targets[@]} benches;" \
  "warnings in kernels/: $(grep -cE 'kernels/[^ :(]+(:[0-9]+:[0-9]+:|\([0-9]+\):) warning' \
    "$LOG_DIR/build.log")," \
  "ptxas spills: $(grep -c 'spilled to local memory' "$LOG_DIR/build.log")"

if [ "$BUILD_ONLY" != 1 ]; then
  # 4. Tests (one GPU: one at a time).
  step ctest-cuda ctest.log 300 ctest --test-dir "$BUILD_DIR" -L cuda --output-on-failure \
    --timeout 240
  note "$(grep -E 'tests passed|tests failed' "$LOG_DIR/ctest.log" | tail -1)"

  # 5. Benchmarks, then the torch baseline for the attention shapes.
  for t in "${bench_targets[@]}"; do
    if [ "$have_gpu" != 1 ]; then
      record "$t" skipped 0 "no GPU"
    elif [ -x "$BUILD_DIR/bin/$t" ]; then
      step "$t" "$t.log" "$BENCH_TIMEOUT" "$BUILD_DIR/bin/$t"
    else
      record "$t" missing 0 "not built"
    fi
  done
  if [ "$have_gpu" != 1 ]; then
    record bench_sdpa_baseline skipped 0 "no GPU"
  elif python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    PYTHONUNBUFFERED=1 step bench_sdpa_baseline bench_sdpa_baseline.log "$BENCH_TIMEOUT" \
      python3 kernels/attention/bench_sdpa_baseline.py
  else
    record bench_sdpa_baseline skipped 0 "torch with CUDA not importable"
  fi
fi

# 6. The table, last, so it is what the caller sees.
echo
for t in "${bench_targets[@]}" bench_sdpa_baseline; do
  [ -f "$LOG_DIR/$t.log" ] && { echo "--- $t (tail)"; tail -n 14 "$LOG_DIR/$t.log"; }
done
SUMMARY_TEXT=("=== gpu_check summary (mode: $mode, build: $BUILD_DIR, logs: $LOG_DIR)"
  "${SUMMARY[@]}")
if [ -f "$LOG_DIR/ctest.log" ]; then
  SUMMARY_TEXT+=("--- tests")
  mapfile -t -O ${#SUMMARY_TEXT[@]} SUMMARY_TEXT < <(
    sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) \.*\** *\([A-Za-z*]*\).* \([0-9.]* sec\).*/  \1 \2 \3/p' \
      "$LOG_DIR/ctest.log")
fi
echo
printf '%s\n' "${SUMMARY_TEXT[@]}"
failed=0
for line in "${SUMMARY[@]}"; do
  case "$line" in
    configure-kernels*FAIL* | build*FAIL* | build*TIMEOUT* | ctest-cuda*FAIL* | \
      ctest-cuda*TIMEOUT* | bench*FAIL* | bench*TIMEOUT*) failed=1 ;;
  esac
done
finish $failed
