#!/usr/bin/env bash
# Tensor-parallel step times on CPU: the "tp" model of make_tiny_model.py
# (hidden 1024, 4 layers, 16 heads, intermediate 2816, vocab 2048, f32; the
# layers dominate the step) served at each size of TP_SIZES, every rank with
# THREADS CPU threads, through scripts/bench_engine.sh. For each size it
# prints pagoda-bench's table: the mean step time and, of it, the forward time
# the workers report and rank 0's time in all-reduces (allred_ms), so the
# share of a step spent communicating is allred_ms / step_ms.
#   BUILD_DIR=build TP_SIZES="1 2 4" THREADS=1 CONCURRENCY=1,8 MAX_TOKENS=32 \
#     PROMPT_LEN=64 ROUNDS=1 scripts/bench_tensor_parallel.sh
# Give it at least max(TP_SIZES) x THREADS otherwise idle cores: ranks that
# share cores measure the contention, not the parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."

for size in ${TP_SIZES:-1 2 4}; do
  echo "== tensor-parallel size $size, ${THREADS:-1} thread(s) per rank"
  PRESET=tp CONCURRENCY=${CONCURRENCY:-1,8} MAX_TOKENS=${MAX_TOKENS:-32} \
    PROMPT_LEN=${PROMPT_LEN:-64} ROUNDS=${ROUNDS:-1} \
    scripts/bench_engine.sh --tensor-parallel-size "$size" --cpu-threads "${THREADS:-1}"
done
