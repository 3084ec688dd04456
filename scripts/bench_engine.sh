#!/usr/bin/env bash
# Engine throughput benchmark: makes the bench model (hidden 512, 8 layers),
# starts a real pagoda-server (with its pagoda-worker) on loopback and runs
# pagoda-bench at 1, 8 and 32 concurrent clients. Prints output tokens/s and
# the mean step time split into schedule / worker RPC / forward / postprocess.
#   BUILD_DIR=build-server CONCURRENCY=1,8,32 MAX_TOKENS=64 ROUNDS=2 scripts/bench_engine.sh
# Extra arguments go to pagoda-server (e.g. --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
PYTHON3=/usr/bin/python3
WORK=$(mktemp -d)
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$PYTHON3" scripts/make_tiny_model.py --preset bench --out "$WORK/model" > /dev/null
"$BIN/pagoda-server" --model "$WORK/model" --port 0 --max-model-len 512 "$@" \
  > "$WORK/server.out" 2> "$WORK/server.log" &
SERVER_PID=$!
for _ in $(seq 1 300); do
  PORT=$(awk '/PAGODA_SERVER_LISTENING/ {print $2}' "$WORK/server.out")
  [ -n "$PORT" ] && break
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    cat "$WORK/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "${PORT:-}" ]; then
  echo "bench_engine: server did not start" >&2
  exit 1
fi
"$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --concurrency "${CONCURRENCY:-1,8,32}" \
  --max-tokens "${MAX_TOKENS:-64}" --prompt-len "${PROMPT_LEN:-32}" --rounds "${ROUNDS:-2}"
