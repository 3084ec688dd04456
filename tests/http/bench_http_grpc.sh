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
source scripts/server_harness.sh

/usr/bin/python3 scripts/make_tiny_model.py --out "$WORK/model" --vocab-size 300 \
  --hidden-size 32 --intermediate-size 64 --num-layers 1 --num-heads 2 --tokenizer > /dev/null
# Blocks for 256 requests of 32 + 64 tokens at once (block size 16).
start_server "${SERVER_BIN:-$BIN/pagoda-server}" --model "$WORK/model" --served-model-name tiny \
  --http-port -1 --max-num-seqs 256 --num-gpu-blocks-override 2048 \
  --worker-binary "$BIN/pagoda-worker" "$@"
HTTP_PORT=$(server_line PAGODA_HTTP_LISTENING)
"$BIN/bench_http_grpc" --grpc "127.0.0.1:$PORT" --http-port "$HTTP_PORT" \
  --server-pid "$SERVER_PID" --concurrency "${CONCURRENCY:-1,16,64,256}" \
  --rounds "${ROUNDS:-4}" --min-requests "${MIN_REQUESTS:-256}" --repeat "${REPEAT:-3}" \
  --modes "${MODES:-grpc,grpc-stream,http,http-stream}" --max-tokens "${MAX_TOKENS:-64}" \
  --prompt-len "${PROMPT_LEN:-32}"
