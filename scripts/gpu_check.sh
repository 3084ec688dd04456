#!/usr/bin/env bash
# The one script for a lent GPU machine (H100/H200): every CUDA test, the GPU
# checks and the benchmarks, in one call of the device tool, with one summary
# table printed last. Meant to finish inside its 10 minutes (TOTAL_BUDGET).
#
# That machine has CUDA 13.0, CMake, ninja and python3 (numpy, torch,
# safetensors) but none of the Debian C++ libraries the worker links (gRPC,
# Abseil, protobuf, glog, GoogleTest) and no network. So the worker,
# the server and the GPU tests are built HERE and travel as one tarball with
# those libraries (scripts/gpu_bundle.sh). The exact steps, in the repository
# root of the checkout the device tool sends:
#
#   scripts/gpu_bundle.sh        # here: builds build/ with nvcc, packs
#                                # .gpu-bundle/pagoda-gpu.tar.xz (~34 MiB, git-ignored)
#   run(command="scripts/gpu_check.sh", carry=[".gpu-bundle"], timeout_s=600)
#
# The bundle must come from the tree being checked: bundle.env records its
# revision and a hash of its tracked files, and the summary says whether this
# checkout's files still hash the same. It unpacks to /tmp/pagoda-gpu-bundle and
# its ctest files are rewritten to that build dir and this checkout (nothing
# outside /tmp and $OUT is written). Without a bundle the script falls back to
# building the kernels alone from source there (MODE=kernels, the old path:
# GoogleTest travels as source in .deps/googletest, carry [".deps"]).
#
# What it runs, in order, each step skipped when the time left is too short:
#  1. ctest -L cuda: kernel tests (REFERENCE.md sweeps, exact cache ops,
#     seeded sampling), GPU-vs-CPU logits (worker_cuda_model_test), graphs vs
#     eager (worker_cuda_graph_test), the service end to end on the GPU
#     (integration_cuda_server_test, with --tensor-parallel-size 2 over NCCL
#     where the machine has two GPUs). GPU tests skip by exit code 77 without
#     a device, so "Skipped" there means "no GPU", never a hidden failure.
#  1a. FP8 (issue 45: the CUDA FP8 KV cache and FP8 W8A8 linears, written
#     without a GPU; the linears' scales-in-cuBLASLt bf16 output is checked
#     in every bf16/f16 case, and the E5M2 cache in the Fp8E5M2* cases of the
#     same cache and attention binaries): their cases ran in step 1
#     (kernels_ops_fp8_linear_test,
#     the Fp8* cases of kernels_ops_cache_ops_test, decode_attention_test and
#     prefill_attention_test, worker_cuda_model_test's fp8 models,
#     worker_cuda_graph_test's fp8 batches); one row
#     gives those binaries' results. Until it reads ok the server refuses
#     --kv-cache-dtype fp8 and the runner FP8 weights on --device cuda.
#  1i. Int4/int8 linears on CUDA (issue 45, written without a GPU: AWQ,
#     GPTQ with act-order, compressed-tensors pack-quantized, and int8
#     W8A8, through the float GEMM and through cuBLASLt's int8 GEMM:
#     W8A8Int8TensorCores*, Int8GemmDeclines*): their cases ran in step 1
#     (kernels_ops_int_linear_test, the
#     awq/gptq/ct_w4a16/ct_w8a8 models of worker_cuda_model_test,
#     worker_cuda_graph_test's int4 batches); one row gives those binaries'
#     results. Until it and the fp8 row read ok the runner refuses
#     quantized checkpoints on --device cuda (RefuseUnverifiedQuantizedWeights).
#  1f. The fused int4 prefill GEMM (kernels_ops_int_gemm_fused_test, issue
#     45, written without a GPU and not yet called by CudaBackend): its own
#     row, int_fused, so a failure there cannot hold back int_linear.
#  1b. Tensor parallelism over NCCL, each its own row of the summary:
#     nccl_size1 (comm_nccl_communicator_test: a one-rank NCCL group
#     all-reducing bf16/f16 on the caller's stream, Abort, and every visible
#     GPU as a rank) and cuda_worker_nccl (worker_cuda_tensor_parallel_test:
#     the CUDA model's all-reduces through NCCL on the backend's stream equal
#     one rank's; two ranks on two GPUs where there are two, their lm_head
#     split over the vocabulary and gathered by NCCL all-gather: until that
#     case reads ok the CUDA runner keeps the head whole on rank 0,
#     cuda_model_runner.cc's TargetLoadOptions). NCCL is the
#     machine's: its CUDA's or its PyTorch's nvidia-nccl-cu13 (libnccl.so.2 is
#     ~210 MiB, over what the device tool carries); the summary names it.
#  1s. Speculative decoding's draft model and EAGLE / EAGLE-3 heads on the
#     CUDA runner (issue 46, written without a GPU): worker_cuda_draft_test
#     ran in step 1 (greedy tokens equal the target alone's up to bf16
#     near-ties, drafts accepted, proposals equal the CPU backend's, the
#     target's decode and verify graphs and a draft model's pass graphs
#     replayed and still live with each draft kind, tokens equal to an eager
#     runner's) and worker_cuda_graph_test (CudaSpeculativeGraphTest: verify
#     steps within num_speculative_tokens' reservation keep the graphs on, a
#     verify replay's logits and EAGLE features equal the eager ones) ran in
#     step 1; one row gives both results. Until it
#     reads ok the server refuses a draft model or EAGLE head with --device
#     cuda (scheduler/spec/draft_model_config.cc).
#  1d. Issue 49's decode-step fusions (written without a GPU; off by default,
#     CudaDecodeFusions in worker/cuda/cuda_decode_fusions.h): their cases
#     ran in step 1 (kernels_ops_cache_ops_test's RopeCacheWrite cases,
#     kernels_ops_layer_ops_test's FusedAddRmsNormIntoSeparateOut,
#     kernels_ops_gemm_test's GemmNoSplitK, kernels_ops_rope_cache_test's
#     PickGemmCandidate, worker_cuda_draft_test's
#     DecodeFusionsKeepTheGreedyTokens); one row gives those binaries'
#     results. When it and the bench_decode_fused row read ok, the defaults
#     in cuda_decode_fusions.h are turned on (kernels/ops/NOTES.md).
#  1c. Structured outputs end to end on the GPU (the structured group):
#     tests/constraints/structured_outputs_e2e_test.py in CUDA mode, every
#     constraint of its suites through the OpenAI API, with and without
#     preemption, on the model and the python3-jsonschema the bundle carries
#     (that machine has neither spm_train nor jsonschema). Bundle mode only.
#  2. bench_paged_attention: decode bandwidth vs a device-to-device copy
#     (bf16, 32 q / 8 kv heads, head 128, block 16; batch 64/256 at 1k/4k,
#     batch 1 at 32k) and prefill TFLOP/s (on an H100/H200 also the wgmma
#     prefill kernel beside mma.sync at 2k/4k/8k causal: issue 49's goal
#     >= 400 TFLOP/s at 2k, >= 450 at 8k), then the same over an FP8 E4M3
#     cache (its rows' times against bf16's: issue 45); bench_cache_ops
#     (its last rows: the rotary + cache write as two launches vs fused);
#     bench_fp8_linear (the FP8 W8A8 linear against bf16 on Llama-3-8B's
#     projections, batch 1 to 4096, with its scales-in-cuBLASLt bf16-out
#     path and W8A8 int8 on the tensor cores: issue 45); bench_int4_linear
#     (the int4 g128 linear against bf16 and its packed-weight floor, batch
#     1 to 4096, and the 8B batch-1 decode step's int4 linears from one CUDA
#     graph: issue 45's batch-1 goal <= 1.3x the floor).
#  3. A Llama-3-8B-shaped bf16 model with random weights
#     (scripts/make_bench_model.py, torch on the GPU), then bench_decode_step:
#     eager and graph decode step at batch 1/64/256, context 1k, vs the
#     (weights + KV) / copy-bandwidth floor; then bench_decode_fused: the
#     graph step at batch 1 and 64 with the decode fusions on and off, each
#     against its floor (issue 49's goals: <= 1.15x at 1, <= 1.12x at 64).
#  4. Offline throughput through the service: pagoda-server --device cuda on
#     that model and pagoda-bench --trace sharegpt.
#  5. Only with ONLY=mixed: latency under load through the service
#     (pagoda-bench --mixed, as scripts/bench_mixed.sh), chunked and not.
# Under $OUT (what comes back): summary.txt, ctest.log, the bench logs and
# logs.tar.gz (every log, server logs too).
#
# Environment:
#   MODE          auto (bundle if .gpu-bundle/pagoda-gpu.tar.xz exists, else kernels) |
#                 bundle | kernels
#   BUILD_ONLY=1  unpack (or build) and check that every binary loads; no tests
#   TOTAL_BUDGET  seconds for the whole run (570)
#   CTEST_LIMIT   seconds for the ctest step (330): a hung test costs no more
#   JOBS          build parallelism in kernels mode (all cores)
#   SKIP_SERVICE_BENCH=1, SKIP_DECODE_BENCH=1  leave those steps out
#   SERVICE_REQUESTS (1000), SERVICE_CONCURRENCY (1000: every request at once,
#                 as an offline run; under the server's 1024-request queue)
#   SERVICE_CONFIGS  the server configurations, one run each, as
#                 MAX_NUM_SEQS:MAX_NUM_BATCHED_TOKENS (0: the server's default)
#                 separated by spaces ("256:0 1024:16384": the server's defaults,
#                 then vLLM's own offline defaults on an 80 GB GPU)
#   PROFILE=1     also time every kernel of the batch-64 decode step with ncu
#   ONLY          comma-separated step groups to run (a rerun of what failed):
#                 ctest,nccl,structured,attention,decode,service (default: all),
#                 and mixed and fp8decode (never by default: the FP8 decode
#                 step, bench_decode_step --quantization fp8 --kv-cache-dtype fp8)
#   MIXED_DURATION   seconds of each mixed run (20)
#   ONLY_TESTS    a ctest -R regex: in the ctest group, only those CUDA tests
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
START=$SECONDS
MODE=${MODE:-auto}
BUILD_ONLY=${BUILD_ONLY:-0}
TOTAL_BUDGET=${TOTAL_BUDGET:-570}
JOBS=${JOBS:-$(nproc)}
BUNDLE=.gpu-bundle/pagoda-gpu.tar.xz
BUNDLE_ROOT=/tmp/pagoda-gpu-bundle
LOG_DIR=$(mktemp -d /tmp/pagoda-gpu-check.XXXXXX)
SUMMARY=()
INFO=()

# wanted GROUP: whether ONLY (default: every group) names it.
wanted() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }
# named GROUP: whether ONLY names it (groups left out of the default run).
named() { [[ ",${ONLY:-}," == *",$1,"* ]]; }

# record NAME STATUS SECONDS [NOTE]
record() { SUMMARY+=("$(printf '%-24s %-9s %5ss  %s' "$1" "$2" "$3" "${4:-}")"); }
note() { SUMMARY[-1]="${SUMMARY[-1]} $*"; }
left() { echo $((TOTAL_BUDGET - (SECONDS - START))); }

# step NAME LOGFILE TIMEOUT_S COMMAND...: runs with a limit cut to the time
# left, tees the log, records the result. Skipped when under 20 s are left.
step() {
  local name=$1 log=$2 limit=$3
  shift 3
  local remaining
  remaining=$(left)
  if [ "$remaining" -lt 20 ]; then
    record "$name" skipped 0 "out of time"
    return 1
  fi
  [ "$limit" -gt "$remaining" ] && limit=$remaining
  local start=$SECONDS
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$LOG_DIR/$log"
  local rc=${PIPESTATUS[0]}
  local status=ok
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && status=TIMEOUT
  [ "$rc" -ne 0 ] && [ "$status" = ok ] && status="FAIL($rc)"
  record "$name" "$status" $((SECONDS - start))
  return "$rc"
}

finish() {
  local rc=$1
  echo
  for t in bench_paged_attention bench_cache_ops bench_fp8_linear bench_int4_linear bench_decode_step \
      bench_decode_fused bench_decode_step_fp8; do
    [ -f "$LOG_DIR/$t.log" ] && { echo "--- $t (tail)"; tail -n 12 "$LOG_DIR/$t.log"; }
  done
  local text=("=== gpu_check summary (mode: $mode, $(($SECONDS - START)) s, logs: $LOG_DIR)"
    "${INFO[@]}" "${SUMMARY[@]}")
  if [ -f "$LOG_DIR/ctest.log" ]; then
    text+=("--- tests")
    mapfile -t -O ${#text[@]} text < <(
      sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) \.*\** *\([A-Za-z*]*\).* \([0-9.]* sec\).*/  \1 \2 \3/p' \
        "$LOG_DIR/ctest.log")
  fi
  printf '%s\n' "${text[@]}" >"$LOG_DIR/summary.txt"
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    # At most 8 files come back: the NCCL logs travel in logs.tar.gz only.
    for f in summary.txt ctest.log bench_paged_attention.log bench_decode_step.log \
        ncu_decode.log service_throughput.log build.log; do
      [ -f "$LOG_DIR/$f" ] && cp "$LOG_DIR/$f" "$OUT/"
    done
    tar -C "$LOG_DIR" -czf "$OUT/logs.tar.gz" .
  fi
  echo
  printf '%s\n' "${text[@]}"
  exit "$rc"
}

echo "=== device"
have_gpu=0
if nvidia-smi >"$LOG_DIR/nvidia-smi.txt" 2>&1; then
  have_gpu=1
  INFO+=("gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader)")
else
  INFO+=("gpu: none (nvidia-smi failed): GPU tests report Skipped, benchmarks are skipped")
fi
echo "${INFO[-1]}"
PY=$(command -v python3 || echo /usr/bin/python3)

if [ "$MODE" = auto ]; then
  if [ -f "$BUNDLE" ]; then MODE=bundle; else MODE=kernels; fi
fi
mode=$MODE

# --- bundle mode: unpack, put the build where its recorded paths point -----
unpack_bundle() {
  rm -rf "$BUNDLE_ROOT" && mkdir -p "$BUNDLE_ROOT" && tar -C "$BUNDLE_ROOT" -xJf "$BUNDLE" ||
    return 1
  # shellcheck disable=SC1091
  source "$BUNDLE_ROOT/bundle.env"
  local tree_hash
  tree_hash=$(scripts/tracked_tree_hash.sh "$BUNDLE_ROOT/tracked_files.txt")
  local tree="the bundle's tree"
  [ "$tree_hash" = "${PAGODA_BUNDLE_TREE_HASH:-}" ] ||
    tree="NOT the bundle's tree (files changed since scripts/gpu_bundle.sh: rebuild it)"
  INFO+=("bundle: rev ${PAGODA_BUNDLE_GIT_REV:0:12} (uncommitted changes: $PAGODA_BUNDLE_DIRTY), built in $PAGODA_BUNDLE_SOURCE_DIR; checkout: $tree")
  # The ctest files name the build and source paths of the machine that
  # built them: point them here (build first: it lies inside the source).
  # Tests find the binaries through PAGODA_BINARY_DIR, which this rewrites.
  BUILD_DIR=$BUNDLE_ROOT/build
  find "$BUILD_DIR" -name CTestTestfile.cmake -exec sed -i \
    -e "s|$PAGODA_BUNDLE_BUILD_DIR|$BUILD_DIR|g" -e "s|$PAGODA_BUNDLE_SOURCE_DIR|$REPO|g" {} +
  # The tests' python (make_tiny_model.py needs numpy): this machine's.
  find "$BUILD_DIR" -name CTestTestfile.cmake -exec \
    sed -i "s|PAGODA_PYTHON3=[^;\"]*|PAGODA_PYTHON3=$PY|g" {} +
  local nccl
  nccl=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
    2>/dev/null || true)
  export LD_LIBRARY_PATH="$BUNDLE_ROOT/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local here_glibc
  here_glibc=$(ldd --version | head -1 | awk '{print $NF}')
  if [ "$(printf '%s\n%s\n' "$PAGODA_BUNDLE_GLIBC" "$here_glibc" | sort -V | head -1)" != \
      "$PAGODA_BUNDLE_GLIBC" ]; then
    INFO+=("glibc $here_glibc < the bundle's $PAGODA_BUNDLE_GLIBC: binaries need $BUNDLE_ROOT/lib-glibc/ld-linux-x86-64.so.2 --library-path ...; tests will fail")
  fi
  # Every binary should find every library (the cheap check BUILD_ONLY
  # runs). A test missing one fails on its own in ctest; the server and
  # worker missing one stop the run here.
  local nccl_loaded
  nccl_loaded=$(ldd "$BUILD_DIR/bin/pagoda-worker" | awk '/libnccl/ {print $3}')
  INFO+=("nccl: ${nccl_loaded:-not linked or not found} (${nccl:+pip nvidia-nccl: $nccl; }gpus: $(nvidia-smi -L 2>/dev/null | grep -c GPU))")
  local missing
  missing=$(for b in "$BUILD_DIR"/bin/*; do ldd "$b" | sed -n "s|^\s*\(\S*\) => not found|$(basename "$b"): \1|p"; done)
  if [ -n "$missing" ]; then
    echo "libraries not found:"
    echo "$missing"
    INFO+=("libraries not found: $(echo "$missing" | tr '\n' ' ')")
    grep -qE '^pagoda-(server|worker):' <<<"$missing" && return 1
  fi
  return 0
}

# --- kernels mode: the CUDA kernels alone, built from source there --------
build_kernels() {
  local gtest_args=()
  for dir in "$REPO/.deps/googletest" /usr/src/googletest; do
    if [ -f "$dir/CMakeLists.txt" ]; then
      gtest_args=(-DPAGODA_GTEST_SOURCE_DIR="$dir")
      break
    fi
  done
  cmake -S scripts/gpu_check -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "${gtest_args[@]}" && cmake --build "$BUILD_DIR" -j "$JOBS" -- -k 0
}

if [ "$mode" = bundle ]; then
  # In this shell (it sets BUILD_DIR and LD_LIBRARY_PATH), so no step/timeout.
  unpack_start=$SECONDS
  unpack_bundle >"$LOG_DIR/unpack.log" 2>&1
  unpack_rc=$?
  cat "$LOG_DIR/unpack.log"
  if [ "$unpack_rc" -ne 0 ]; then
    record unpack "FAIL($unpack_rc)" $((SECONDS - unpack_start))
    finish 1
  fi
  record unpack ok $((SECONDS - unpack_start)) "$(ls "$BUILD_DIR/bin" | wc -l) binaries"
else
  export BUILD_DIR=build-gpu-kernels REPO JOBS
  export -f build_kernels
  step build build.log 480 bash -c build_kernels || finish 1
fi
echo "=== build dir: $BUILD_DIR"
[ "$BUILD_ONLY" = 1 ] && finish 0

# 1. Every CUDA test (the service test and the runner's load test alone: they
#    size their KV cache to the GPU's memory).
NCCL_TESTS=(comm_nccl_communicator_test worker_cuda_tensor_parallel_test)
# -j: the kernel tests share the GPU; tests that size memory to the whole GPU
# are RUN_SERIAL in their CMakeLists.
if wanted ctest; then
  step ctest-cuda ctest.log "${CTEST_LIMIT:-330}" ctest --test-dir "$BUILD_DIR" -L cuda \
    --output-on-failure -j 8 --timeout 300 ${ONLY_TESTS:+-R "$ONLY_TESTS"} -E "^($(IFS='|'; echo "${NCCL_TESTS[*]}"))\$"
  note "$(grep -E 'tests passed|tests failed' "$LOG_DIR/ctest.log" | tail -1)"
fi

# 1a'. The Hopper prefill kernel (issue 49): prefill_attention_wgmma_test,
#     every bf16/f16 prefill sweep through PrefillKernel::kWgmma, in a process
#     of its own. Until it reads ok the worker keeps mma.sync by default
#     (PAGODA_PREFILL_KERNEL=wgmma opts in).
if wanted ctest && [ -f "$LOG_DIR/ctest.log" ]; then
  wgmma_result=$(sed -n 's/^.*Test *#[0-9]*: prefill_attention_wgmma_test \.*\** *\([A-Za-z*]*\).*/\1/p' \
    "$LOG_DIR/ctest.log" | tail -1)
  record wgmma-prefill "$([ "$wgmma_result" = Passed ] && echo ok || echo CHECK)" 0 \
    "prefill_attention_wgmma_test:${wgmma_result:-not run}"
fi

# record_tests ROW TEST...: one row from ctest.log's results of the test
# binaries holding a feature's cases: ok when every one passed, CHECK when
# one failed or did not run, missing when none is in the log.
record_tests() {
  local row=$1 results status=ok
  shift
  results=$(for t in "$@"; do
    sed -n "s/^.*Test *#[0-9]*: $t \.*\** *\([A-Za-z*]*\).*/$t:\1/p" "$LOG_DIR/ctest.log" | tail -1
  done | tr '\n' ' ')
  grep -qvE ':Passed( |$)' <<<"$(tr ' ' '\n' <<<"$results" | sed '/^$/d')" && status=CHECK
  [ "$(wc -w <<<"$results")" -lt "$#" ] && status=CHECK  # one not run
  [ -z "$results" ] && status=missing
  record "$row" "$status" 0 "$results"
}

# 1a. The FP8 row: the results of the binaries holding the FP8 cases.
FP8_TESTS=(kernels_ops_fp8_linear_test kernels_ops_cache_ops_test decode_attention_test
  prefill_attention_test worker_cuda_model_test worker_cuda_graph_test)
if wanted ctest && [ -f "$LOG_DIR/ctest.log" ]; then
  record_tests fp8 "${FP8_TESTS[@]}"
fi

# 1i. The int row: the results of the binaries holding the int4/int8 cases.
INT_TESTS=(kernels_ops_int_linear_test worker_cuda_model_test worker_cuda_graph_test)
if wanted ctest && [ -f "$LOG_DIR/ctest.log" ]; then
  record_tests int_linear "${INT_TESTS[@]}"
fi

# 1d. The decode-fusions row: the results of the binaries holding their cases.
FUSION_TESTS=(kernels_ops_cache_ops_test kernels_ops_layer_ops_test kernels_ops_gemm_test
  kernels_ops_rope_cache_test worker_cuda_draft_test)
if wanted ctest && [ -f "$LOG_DIR/ctest.log" ]; then
  record_tests decode_fusions "${FUSION_TESTS[@]}"
fi

# 1f. The fused int4 prefill GEMM (not yet serving; its own row so that it
# cannot hold back int_linear): ok here is what turning it on waits for.
if wanted ctest && [ -f "$LOG_DIR/ctest.log" ]; then
  fused_result=$(sed -n "s/^.*Test *#[0-9]*: kernels_ops_int_gemm_fused_test \.*\** *\([A-Za-z*]*\).*/\1/p" \
    "$LOG_DIR/ctest.log" | tail -1)
  fused_status=CHECK
  [ "$fused_result" = Passed ] && fused_status=ok
  [ -z "$fused_result" ] && fused_status=missing
  record int_fused "$fused_status" 0 "kernels_ops_int_gemm_fused_test:$fused_result"
fi

# 1b. The NCCL checks, verbose so the summary can count gtest's cases.
nccl_step() {  # ROW TEST
  # grep -c, not -q: an early exit would SIGPIPE ctest and fail the pipe.
  if [ "$(ctest --test-dir "$BUILD_DIR" -N -R "^$2\$" | grep -c 'Total Tests: 1')" != 1 ]; then
    record "$1" missing 0 "$2 not built (no NCCL at build time?)"
    return
  fi
  step "$1" "$1.log" 240 ctest --test-dir "$BUILD_DIR" -R "^$2\$" -V --timeout 240
  note "$2: $(grep -cE '\[ +OK \]' "$LOG_DIR/$1.log") ok," \
    "$(grep -oE 'SKIPPED \] [A-Za-z][^ ]*' "$LOG_DIR/$1.log" | sort -u | wc -l) skipped" \
    "$(grep -qE 'Test +#[0-9]+: .*\*+Skipped' "$LOG_DIR/$1.log" && echo '(whole test skipped: no GPU)')"
}
if wanted nccl; then
  nccl_step nccl_size1 "${NCCL_TESTS[0]}"
  nccl_step cuda_worker_nccl "${NCCL_TESTS[1]}"
fi

# 1s. The speculative row: the draft model / EAGLE test's result in step 1,
#     and the graph test's (its CudaSpeculativeGraphTest cases: verify steps
#     within the load-time reservation keep the graphs on, a verify replay
#     and EAGLE features out of a replay equal the eager ones).
#     worker_cuda_draft_test's GraphReplayWithDraftsGivesTheEagerTokens
#     checks the runner's graphs (decode, verify, draft passes) replay and
#     stay on with a draft model and EAGLE / EAGLE-3 heads.
SPEC_TESTS=(worker_cuda_draft_test worker_cuda_graph_test)
if wanted ctest && [ -f "$LOG_DIR/ctest.log" ]; then
  spec_results=$(for t in "${SPEC_TESTS[@]}"; do
    sed -n "s/^.*Test *#[0-9]*: $t \.*\** *\([A-Za-z*]*\).*/$t:\1/p" "$LOG_DIR/ctest.log" | tail -1
  done | tr '\n' ' ')
  spec_status=ok
  grep -qvE ':Passed( |$)' <<<"$(tr ' ' '\n' <<<"$spec_results" | sed '/^$/d')" && spec_status=CHECK
  [ "$(wc -w <<<"$spec_results")" -lt "${#SPEC_TESTS[@]}" ] && spec_status=CHECK  # one not run
  [ -z "$spec_results" ] && spec_status=missing
  record speculative "$spec_status" 0 "$spec_results"
fi

# 1c. Structured outputs on the GPU; the summary row carries the suite's
#     own summary line and its count of failures.
if wanted structured; then
  if [ "$mode" != bundle ]; then
    record structured_outputs skipped 0 "bundle mode only"
  elif [ "$have_gpu" != 1 ]; then
    record structured_outputs skipped 0 "no GPU"
  else
    step structured_outputs structured_outputs.log 300 env PAGODA_E2E_DEVICE=cuda \
      PAGODA_E2E_MODEL="$BUNDLE_ROOT/models/structured-outputs" PAGODA_BIN_DIR="$BUILD_DIR/bin" \
      PYTHONPATH="$BUNDLE_ROOT/python" "$PY" tests/constraints/structured_outputs_e2e_test.py
    note "$(grep -E '^cuda:|failures$' "$LOG_DIR/structured_outputs.log" | tr '\n' ' ')"
  fi
fi

run_bench() {  # NAME TIMEOUT ARGS...: a benchmark binary of the build, GPU only.
  local name=$1 limit=$2
  shift 2
  if [ "$have_gpu" != 1 ]; then
    record "$name" skipped 0 "no GPU"
  elif [ ! -x "$BUILD_DIR/bin/$name" ]; then
    record "$name" missing 0 "not built"
  else
    step "$name" "$name.log" "$limit" "$BUILD_DIR/bin/$name" "$@"
  fi
}

# 2. Kernel benchmarks.
if wanted attention; then
  run_bench bench_paged_attention 90 --iters 20
  note "$(grep -E 'ctx +32768' "$LOG_DIR/bench_paged_attention.log" 2>/dev/null | head -1 |
    sed 's/  */ /g')"
  note "| $(grep -E 'decode fp8 .*ctx +32768' "$LOG_DIR/bench_paged_attention.log" 2>/dev/null |
    head -1 | sed 's/  */ /g')"
  # The Hopper prefill kernel (PrefillKernel::kWgmma) against mma.sync, no
  # prefix (goal >= 400 TFLOP/s at 2k, >= 450 at 8k).
  note "| goal 2k >= 400, 8k >= 450 TFLOP/s: $(grep -E '^prefill wgmma( tokens +(2048|8192) prefix +0:|: skipped)' \
    "$LOG_DIR/bench_paged_attention.log" 2>/dev/null | sed -E 's/  +/ /g' | tr '\n' ';')"
  # Its SASS must hold wgmma (HGMMA): the build machine has no cuobjdump.
  if command -v cuobjdump >/dev/null; then
    note "| HGMMA in bench_paged_attention: $(cuobjdump -sass "$BUILD_DIR/bin/bench_paged_attention" \
      2>/dev/null | grep -c HGMMA)"
  fi
  run_bench bench_cache_ops 45
  # The fused rotary + cache write's speed over the two launches' (> 100 %: it pays).
  note "$(awk '/^rope_cache_write x(1|64|256) / { printf "fused rope+cache %s: %s of 2 launches; ", $2, $NF }' \
    "$LOG_DIR/bench_cache_ops.log" 2>/dev/null)"
  # The FP8 W8A8 linear against bf16 on Llama-3-8B's projections (issue 45):
  # the f32-product path, the scales-in-cuBLASLt bf16-out path (fused) and
  # W8A8 int8 on the tensor cores (int8); 0.00x = cuBLASLt declined it.
  run_bench bench_fp8_linear 90 --iters 10
  note "$(grep -E '^gate_up .* rows +(1|64|4096) ' "$LOG_DIR/bench_fp8_linear.log" 2>/dev/null |
    sed -E 's/.* rows +([0-9]+) .*bf16\/fp8 +([0-9.]+x).*bf16\/fused +([0-9.]+x).*bf16\/int8 +([0-9.]+x).*/gate_up x\1: \2 fused \3 int8 \4/' |
    tr '\n' ' ')"
  # The int4 g128 linear against its packed-weight floor (goal <= 1.3x at
  # batch 1) and bf16 (issue 45).
  run_bench bench_int4_linear 90 --iters 10
  note "$(grep -E '^(gate_up|down) .* rows +1 ' "$LOG_DIR/bench_int4_linear.log" 2>/dev/null |
    sed -E 's/^([a-z_]+) .*floor +[0-9.]+, +([0-9.]+x).*bf16\/int4 +([0-9.]+x).*/\1 x1: \2 floor (goal <= 1.30x), bf16\/int4 \3/' |
    tr '\n' ' ')"
  # The fused int4 GEMM (not yet serving) against dequantize + GEMM.
  note "$(grep -E '^gate_up .* rows +(16|64|4096) ' "$LOG_DIR/bench_int4_linear.log" 2>/dev/null |
    sed -E 's/.* rows +([0-9]+) .*int4\/fused +([0-9.]+x).*/gate_up x\1 int4\/fused \2/' | tr '\n' ' ')"
  # The 8B batch-1 decode step's linears (32 layers of int4 GEMVs and the
  # bf16 lm_head, one CUDA graph) against their packed-weight read floor.
  note "$(grep -E '^step ' "$LOG_DIR/bench_int4_linear.log" 2>/dev/null |
    sed -E 's/.*graph +([0-9.]+) us \(floor +([0-9.]+), +([0-9.]+x).*/int4 8B step x1: \1 us, \3 its floor \2 us (goal <= 1.30x)/')"
fi

# 3. Llama-3-8B-shaped decode step (bundle mode: needs the worker).
MODEL=/tmp/pagoda-llama3-8b-random
if [ "$mode" = bundle ] && [ "$have_gpu" = 1 ] &&
    { wanted decode || wanted service || named mixed || named fp8decode; } &&
    [ "${SKIP_DECODE_BENCH:-0}" != 1 ]; then
  if [ ! -f "$MODEL/config.json" ]; then
    PYTHONUNBUFFERED=1 LD_LIBRARY_PATH="" step make_bench_model make_bench_model.log 150 \
      "$PY" scripts/make_bench_model.py --out "$MODEL"
  fi
  wanted decode && [ -f "$MODEL/config.json" ] &&
    run_bench bench_decode_step 150 --model "$MODEL" --batches 1,64,256 --context 1024 --iters 10
  # Issue 49's decode fusions on vs off in the same run (no timed graphs),
  # each against the floor; fused/plain < 1 is the gain.
  if wanted decode && [ -f "$MODEL/config.json" ]; then
    step bench_decode_fused bench_decode_fused.log 150 "$BUILD_DIR/bin/bench_decode_step" \
      --model "$MODEL" --batches 1,64 --context 1024 --iters 10 --timed 0 --fusions 1
    note "$(awk 'NF == 11 && ($1 == "1" || $1 == "64") {
      printf "b%s: fused %sx floor (goal <= %s), plain %sx, fused/plain %s; ",
        $1, $9, ($1 == "1" ? "1.15x" : "1.12x"), $8, $11 }' "$LOG_DIR/bench_decode_fused.log")"
  fi
  # ONLY=fp8decode (never by default: the host quantizes the 8B model's
  # linears at load): the same step with online FP8 W8A8 linears and an FP8
  # KV cache, against its own floor (issue 45; its graph ms over the bf16
  # run's is the FP8 decode speedup).
  if named fp8decode && [ -f "$MODEL/config.json" ]; then
    step bench_decode_step_fp8 bench_decode_step_fp8.log 300 "$BUILD_DIR/bin/bench_decode_step" \
      --model "$MODEL" --batches 1,64,256 --context 1024 --iters 10 --quantization fp8 \
      --kv-cache-dtype fp8
  fi
  # PROFILE=1: every kernel's time in the batch-64 decode step (Nsight
  # Compute, clocks left as they are), to see where the step's time over
  # its floor goes.
  if wanted decode && [ "${PROFILE:-0}" = 1 ] && command -v ncu >/dev/null && [ -f "$MODEL/config.json" ]; then
    step ncu_decode ncu_decode.log 120 ncu --clock-control none --launch-count 1500 \
      --metrics gpu__time_duration.sum --print-summary per-kernel "$BUILD_DIR/bin/bench_decode_step" --model "$MODEL" \
      --batches 64 --context 1024 --iters 4
  fi
fi

# Starts pagoda-server --device cuda on MODEL with SERVER_FLAGS, runs
# pagoda-bench against it with BENCH_FLAGS, stops the server; the server's
# log is server-NAME.log.
serve_and_bench() {  # NAME SERVER_FLAGS... -- BENCH_FLAGS...
  local name=$1 server_flags=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    server_flags+=("$1")
    shift
  done
  shift
  local out=$LOG_DIR/server.out
  "$BUILD_DIR/bin/pagoda-server" --model "$MODEL" --device cuda --port 0 --metrics-port 0 \
    "${server_flags[@]}" >"$out" 2>"$LOG_DIR/server-$name.log" &
  local pid=$! port=""
  for _ in $(seq 1 900); do
    port=$(awk '/PAGODA_SERVER_LISTENING/ {print $2}' "$out")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if [ -z "$port" ]; then
    echo "pagoda-server did not start:"
    tail -n 20 "$LOG_DIR/server-$name.log"
    kill "$pid" 2>/dev/null
    return 1
  fi
  grep -E "KV cache|workers run on|captured" "$LOG_DIR/server-$name.log" | tail -3
  "$BUILD_DIR/bin/pagoda-bench" --server "127.0.0.1:$port" "$@"
  local rc=$?
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  return $rc
}

# 4. Offline throughput through the service on a ShareGPT-like trace.
service_throughput() {  # MAX_NUM_SEQS MAX_NUM_BATCHED_TOKENS
  serve_and_bench "$1-$2" --max-model-len 2048 --max-num-seqs "$1" \
    --max-num-batched-tokens "$2" -- --trace sharegpt \
    --trace_requests "${SERVICE_REQUESTS:-1000}" --concurrency "${SERVICE_CONCURRENCY:-1000}"
}
if [ "$mode" = bundle ] && [ "$have_gpu" = 1 ] && [ -f "$MODEL/config.json" ] &&
    wanted service && [ "${SKIP_SERVICE_BENCH:-0}" != 1 ]; then
  export MODEL BUILD_DIR LOG_DIR SERVICE_REQUESTS SERVICE_CONCURRENCY
  export -f serve_and_bench service_throughput
  for config in ${SERVICE_CONFIGS:-256:0 1024:16384}; do
    seqs=${config%%:*} tokens=${config##*:}
    step "service_${seqs}_${tokens}" "service_${seqs}_${tokens}.log" 150 \
      bash -c 'service_throughput "$@"' _ "$seqs" "$tokens"
    note "$(awk -v c="${SERVICE_CONCURRENCY:-1000}" \
      '$1 == c {print $6 " output tok/s, errors " $3 ", batch " $8 ", step " $9 " ms (engine CPU " $15 " ms)"}' \
      "$LOG_DIR/service_${seqs}_${tokens}.log")"
    cat "$LOG_DIR/service_${seqs}_${tokens}.log" >>"$LOG_DIR/service_throughput.log"
  done
fi

# 5. Latency under load on the GPU (ONLY=mixed: not in the default run):
#    scripts/bench_mixed.sh's workload against the service on that model,
#    16 streams of 256-token prompts with no long prompts, then a 2,048-token
#    prompt every 2 s chunked (the default budget) and unchunked;
#    MIXED_DURATION seconds each. The summary rows carry the streams' line:
#    TTFT and inter-token latency p50/p90/p99 (p99.9, max) in ms, output
#    tok/s. Then the priority run (as bench_mixed.sh's STREAMS=48 EVERY=0
#    URGENT_EVERY=0.5 with --scheduling-policy priority --max-num-seqs 16):
#    its row carries the urgent requests' TTFT at saturation and on the idle
#    server, and the ratio of their medians.
mixed_latency() {  # STREAMS EVERY URGENT_EVERY [SERVER_FLAGS...]
  local streams=$1 every=$2 urgent=$3
  shift 3
  serve_and_bench "mixed-$streams-$every-$urgent$*" --max-model-len 4096 "$@" -- --mixed \
    --mixed-streams "$streams" --mixed-long-every "$every" --mixed-urgent-every "$urgent" \
    --mixed-duration "${MIXED_DURATION:-20}" --mixed-plot ""
}
if [ "$mode" = bundle ] && [ "$have_gpu" = 1 ] && [ -f "$MODEL/config.json" ] && named mixed; then
  export MODEL BUILD_DIR LOG_DIR MIXED_DURATION
  export -f serve_and_bench mixed_latency
  for run in "no_long 16 0 0" "chunked 16 2 0" "unchunked 16 2 0 --no-enable-chunked-prefill" \
      "priority 48 0 0.5 --scheduling-policy priority --max-num-seqs 16"; do
    read -r label streams every urgent flags <<<"$run"
    # shellcheck disable=SC2086
    step "mixed_$label" "mixed_$label.log" 120 bash -c 'mixed_latency "$@"' _ "$streams" "$every" \
      "$urgent" $flags
    if [ "$label" = priority ]; then
      note "$(awk '$1 == "urgent" || $1 == "urgent-idle" {printf "%s ttft %s/%s/%s; ", $1, $4, $5, $6}
        $1 == "priority:" {printf "%s", $NF}' "$LOG_DIR/mixed_$label.log")"
    else
      note "$(awk '$1 == "streams" {print "ttft " $4 "/" $5 "/" $6 ", itl " $7 "/" $8 "/" $9 \
        " (p99.9 " $11 ", max " $12 "), " $10 " tok/s"}' "$LOG_DIR/mixed_$label.log")"
    fi
  done
fi

failed=0
for line in "${SUMMARY[@]}"; do
  case "$line" in *FAIL* | *TIMEOUT*) failed=1 ;; esac
done
finish $failed
