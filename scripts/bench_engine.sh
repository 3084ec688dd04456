#!/usr/bin/env bash
# Engine throughput benchmark: makes the benchmark model (PRESET of
# make_tiny_model.py; default b1: hidden 512, 8 layers, 8 q / 2 kv heads,
# intermediate 1536, vocab 8192, f32; WEIGHT_DTYPE=bf16 or f16 stores it so;
# PRESET=llama1b is Llama-3.2-1B-shaped, 2.5 GB of bf16, a minute or more to
# write: MODEL_DIR=DIR keeps the model there and reuses it on later runs),
# starts a real pagoda-server (with its pagoda-worker) on loopback and runs
# pagoda-bench at 1, 8 and 32 concurrent clients. Prints output tokens/s and
# the mean step time split into schedule / worker RPC / forward / postprocess.
#   BUILD_DIR=build-server CONCURRENCY=1,8,32 MAX_TOKENS=64 PROMPT_LEN=64 ROUNDS=2 \
#     PRESET=b1 WEIGHT_DTYPE=f32 scripts/bench_engine.sh
# Extra arguments go to pagoda-server (e.g. --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
PYTHON3=/usr/bin/python3
WORK=$(mktemp -d)
source scripts/server_harness.sh

MODEL=${MODEL_DIR:-$WORK/model}
if [ ! -f "$MODEL/config.json" ]; then
  PRESET=${PRESET:-b1}
  DTYPE_FLAG=()
  # llama1b's preset dtype (bf16) unless WEIGHT_DTYPE says otherwise.
  if [ -n "${WEIGHT_DTYPE:-}" ] || [ "$PRESET" != llama1b ]; then
    DTYPE_FLAG=(--dtype "${WEIGHT_DTYPE:-f32}")
  fi
  "$PYTHON3" scripts/make_tiny_model.py --preset "$PRESET" "${DTYPE_FLAG[@]}" \
    --out "$MODEL" > /dev/null
fi
start_server "$BIN/pagoda-server" --model "$MODEL" --max-model-len 512 "$@"
"$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --concurrency "${CONCURRENCY:-1,8,32}" \
  --max-tokens "${MAX_TOKENS:-64}" --prompt-len "${PROMPT_LEN:-64}" --rounds "${ROUNDS:-2}"
# The worker's resident memory after the run (weights, KV cache as touched,
# workspace): VmRSS now and VmHWM, its peak.
WORKER_PIDS=$(server_line PAGODA_WORKER_PIDS)
for pid in ${WORKER_PIDS//,/ }; do
  awk -v pid="$pid" '/^VmRSS|^VmHWM/ {printf "worker %s %s %s kB\n", pid, $1, $2}' \
    "/proc/$pid/status" 2>/dev/null || true
done

