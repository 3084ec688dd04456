#!/usr/bin/env bash
# HTTP vs gRPC on one pagoda-server: makes the tiny test model (where the
# per-request cost of a front door shows most), starts the server with both
# doors open and runs bench_http_grpc against it (requests/s, output
# tokens/s, TTFT p50/p99 and the server's CPU time per output token, four
# ways, at each concurrency).
# Each row is the median of REPEAT runs, the four ways taking turns (this
# host's other load then falls on each alike). SERVER_BIN runs another
# pagoda-server (an older build, to compare before and after a change).
#   BUILD_DIR=build CONCURRENCY=1,16,64,256 ROUNDS=4 MIN_REQUESTS=256 REPEAT=3 \
#     MODES=grpc,grpc-stream,http,http-stream MAX_TOKENS=64 PROMPT_LEN=32 \
#     SERVER_BIN=build/bin/pagoda-server tests/http/bench_http_grpc.sh [more pagoda-server flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${BUILD_DIR:-build}/bin"
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

/usr/bin/python3 scripts/make_tiny_model.py --out "$WORK/model" --vocab-size 300 \
  --hidden-size 32 --intermediate-size 64 --num-layers 1 --num-heads 2 --tokenizer > /dev/null
# Blocks for 256 requests of 32 + 64 tokens at once (block size 16).
"${SERVER_BIN:-$BIN/pagoda-server}" --model "$WORK/model" --served-model-name tiny --port 0 --http-port -1 \
  --max-num-seqs 256 --num-gpu-blocks-override 2048 --worker-binary "$BIN/pagoda-worker" "$@" \
  > "$WORK/server.out" 2> "$WORK/server.log" &
SERVER_PID=$!
for _ in $(seq 1 300); do
  GRPC_PORT=$(awk '/PAGODA_SERVER_LISTENING/ {print $2}' "$WORK/server.out")
  [ -n "$GRPC_PORT" ] && break
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then
    cat "$WORK/server.log" >&2
    exit 1
  fi
  sleep 0.1
done
if [ -z "${GRPC_PORT:-}" ]; then
  echo "bench_http_grpc.sh: server did not start" >&2
  exit 1
fi
HTTP_PORT=$(awk '/PAGODA_HTTP_LISTENING/ {print $2}' "$WORK/server.out")
"$BIN/bench_http_grpc" --grpc "127.0.0.1:$GRPC_PORT" --http-port "$HTTP_PORT" \
  --server-pid "$SERVER_PID" --concurrency "${CONCURRENCY:-1,16,64,256}" \
  --rounds "${ROUNDS:-4}" --min-requests "${MIN_REQUESTS:-256}" --repeat "${REPEAT:-3}" \
  --modes "${MODES:-grpc,grpc-stream,http,http-stream}" --max-tokens "${MAX_TOKENS:-64}" \
  --prompt-len "${PROMPT_LEN:-32}"
