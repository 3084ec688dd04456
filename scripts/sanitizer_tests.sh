#!/usr/bin/env bash
# The sanitizer part of the test command (scripts/test.sh runs both modes
# after the main suite). Each mode has its own build folder, configured with
# Debian's clang and built for only the targets it runs:
#
#   scripts/sanitizer_tests.sh asan   ASan+UBSan (build-asan): every fuzzer of
#       tests/fuzz for PAGODA_FUZZ_SECONDS (15) each, two at a time, then the
#       unit tests of scheduler/ (engine, kv, api), wire/, text/, common/,
#       the step-plan checks of worker/ and one integration test.
#   scripts/sanitizer_tests.sh tsan   TSan (build-tsan): the threaded unit
#       tests (engine, HTTP server, validation pool, frame channel,
#       rendezvous store, step cancellation, thread pool) and one
#       integration test.
#
# Any sanitizer report fails the test that made it. Tests that load a
# SentencePiece model cannot run here: the sanitizer runtimes refuse the
# RTLD_DEEPBIND that text/sentencepiece_adapter.cc needs, so those cases are
# filtered out below, by name, with that reason.
#   ASAN_BUILD_DIR=build-asan TSAN_BUILD_DIR=build-tsan JOBS=2 PAGODA_FUZZ_SECONDS=15
#
# A second argument, `build`, stops after the build: the test command builds
# both modes that way in the background while its main suite runs (mostly
# waiting on server and worker processes), then runs each mode in full, whose
# build is then up to date.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:?usage: scripts/sanitizer_tests.sh asan|tsan [build]}
phase=${2:-all}
if [ "$phase" != all ] && [ "$phase" != build ]; then
  echo "unknown phase $phase (build, or none for build and tests)" >&2
  exit 2
fi
JOBS=${JOBS:-$(nproc)}
# 15 s each keeps the whole test command inside its 30 minutes on 2 cores
# (CI: 1,759 s with 30 s each, 1,631 s with 20 s, before this wave's
# tests); longer runs: docs/fuzzing.md.
FUZZ_SECONDS=${PAGODA_FUZZ_SECONDS:-15}

# Unit tests for both modes' lists, and the gtest filter of each where a
# case needs SentencePiece.
ASAN_TESTS=(
  scheduler_scheduler_test scheduler_engine_sim_test scheduler_beam_search_test
  scheduler_chunked_test scheduler_block_manager_test scheduler_engine_test
  scheduler_recovery_test scheduler_http_server_test scheduler_validation_pool_test
  scheduler_background_lane_test scheduler_stop_strings_test scheduler_openai_protocol_test
  scheduler_generation_config_test scheduler_request_validation_test scheduler_constrained_beam_test
  wire_frame_channel_test wire_worker_secret_test comm_rendezvous_store_test
  comm_tcp_bootstrap_race_test
  text_hf_tokenizer_test text_chat_template_test text_utf8_test
  common_safetensors_test common_model_config_test common_protobuf_log_test
  worker_flat_batch_test worker_step_batch_upload_test worker_logits_processing_test worker_metrics_test
  integration_fault_injection_test
)
TSAN_TESTS=(
  scheduler_engine_test scheduler_recovery_test scheduler_http_server_test
  scheduler_constrained_beam_test scheduler_validation_pool_test scheduler_background_lane_test
  wire_frame_channel_test comm_rendezvous_store_test comm_tcp_bootstrap_race_test
  worker_step_cancellation_test
  worker_cpu_thread_pool_test
  integration_fault_injection_test
)
# gtest filters: cases that load a SentencePiece tokenizer (see above); and
# four of the block manager's six randomized seeds, whose invariant checks
# take 10 s each under ASan (0.1 s in the main suite, which runs all six):
# the two kept cover both hash functions and both watermarks.
declare -A GTEST_FILTERS=(
  [scheduler_request_validation_test]="-RequestValidationTokenizerTest.*"
  [scheduler_block_manager_test]="-Seeds/RandomizedBlockManagerTest.*/0:Seeds/RandomizedBlockManagerTest.*/3:Seeds/RandomizedBlockManagerTest.*/4:Seeds/RandomizedBlockManagerTest.*/5"
)

case "$mode" in
  asan)
    build_dir=${ASAN_BUILD_DIR:-build-asan}
    sanitize=address,undefined
    # -O1: the fuzzers run 5 to 15x more inputs a second than at -O0.
    opt=-O1
    fuzzers=ON
    tests=("${ASAN_TESTS[@]}")
    ;;
  tsan)
    build_dir=${TSAN_BUILD_DIR:-build-tsan}
    sanitize=thread
    # -O0: 177 s of CPU to build against 249 s at -O1, and its tests take
    # 40 s against 30 s (no fuzzer here).
    opt=-O0
    fuzzers=OFF
    tests=("${TSAN_TESTS[@]}")
    ;;
  *)
    echo "unknown mode $mode (asan or tsan)" >&2
    exit 2
    ;;
esac

# Line tables: every report names its lines. Unity builds (16 sources a
# unit): sanitizer instrumentation of the inline code of Abseil, protobuf
# and JSON headers dominates these compiles, and a unity source instruments
# it once for all its sources (about 3x less CPU). LLVM's linker (lld):
# about a quarter of BFD's CPU time for a sanitized test binary (gold warns
# on the runtimes' symbols).
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
  -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt -gline-tables-only" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt -gline-tables-only" \
  -DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld-14 -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld-14 \
  -DPAGODA_ENABLE_CUDA=OFF -DPAGODA_SANITIZE="$sanitize" -DPAGODA_FUZZERS="$fuzzers" \
  -DPAGODA_FUZZ_SECONDS="$FUZZ_SECONDS"

targets=("${tests[@]}")
if [ "$fuzzers" = ON ]; then
  mapfile -t fuzz_targets < <(ctest --test-dir "$build_dir" -N -L fuzz | sed -n 's/^ *Test *#[0-9]*: //p')
  targets+=("${fuzz_targets[@]}")
fi
cmake --build "$build_dir" -j "$JOBS" --target "${targets[@]}"
echo "== ${mode}: built in ${SECONDS} s"
[ "$phase" = build ] && exit 0

# Every report, from a test or from a server or worker process it started
# (which a test that survives worker restarts would not notice), goes to a
# file under $reports; any file there fails the run.
reports="$PWD/$build_dir/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_SYMBOLIZER_PATH=/usr/bin/llvm-symbolizer-14
if [ "$mode" = asan ]; then
  export ASAN_OPTIONS="detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$reports/asan"
  export UBSAN_OPTIONS="print_stacktrace=1:log_path=$reports/ubsan"
else
  export TSAN_OPTIONS="second_deadlock_stack=1:suppressions=$PWD/tests/sanitizers/tsan.supp:log_path=$reports/tsan"
fi

failed=0
if [ "$fuzzers" = ON ]; then
  echo "== fuzzers, ${FUZZ_SECONDS} s each, ${JOBS} at a time"
  ctest --test-dir "$build_dir" -L fuzz -j "$JOBS" --output-on-failure || failed=1
  # Executions per fuzzer, from libFuzzer's final stats.
  awk '/ Testing: fuzz_/ {name = $3}
       /stat::number_of_executed_units/ {runs = $2}
       /stat::average_exec_per_sec/ {printf "%s: %s executions, %s a second\n", name, runs, $2}' \
    "$build_dir"/Testing/Temporary/LastTest.log
fi
echo "== ${mode} tests"
plain=()
for test in "${tests[@]}"; do
  if [ -n "${GTEST_FILTERS[$test]:-}" ]; then
    GTEST_FILTER="${GTEST_FILTERS[$test]}" ctest --test-dir "$build_dir" -R "^${test}\$" \
      --output-on-failure --timeout 900 || failed=1
  else
    plain+=("$test")
  fi
done
regex="^($(IFS='|'; echo "${plain[*]}"))\$"
# Two at a time, as the main suite runs them (the tests that time failure
# detection run alone: pagoda_serial_tests).
ctest --test-dir "$build_dir" -R "$regex" -j "$JOBS" --output-on-failure --timeout 900 || failed=1
if [ -n "$(ls -A "$reports")" ]; then
  for report in "$reports"/*; do
    echo "== sanitizer report $report"
    head -c 20000 "$report"
  done
  echo "${mode}: $(ls "$reports" | wc -l) sanitizer report(s), above"
  failed=1
fi
echo "== ${mode}: done in ${SECONDS} s"
exit "$failed"
