#!/usr/bin/env bash
# The run command: installs what building and running need (not the tests'
# packages), builds the service, makes the demo model (a tiny random Llama
# with a locally trained tokenizer and a chat template), starts pagoda-server
# on CPU (it spawns its pagoda-worker) with gRPC, OpenAI HTTP and metrics, and
# sends a first request of each kind: a gRPC stream, an HTTP completion and an
# HTTP chat completion, printing the curl commands it sends. The server keeps
# serving until Ctrl-C; PAGODA_DEMO_ONCE=1 stops it after the requests.
#   PORT=50051 HTTP_PORT=8000 METRICS_PORT=9400 MODEL_DIR=models/demo scripts/run_demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
MODEL_DIR=${MODEL_DIR:-models/demo}
PORT=${PORT:-50051}
METRICS_PORT=${METRICS_PORT:-9400}
HTTP_PORT=${HTTP_PORT:-8000}

[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)" --target pagoda-server pagoda-worker pagoda-cli

if [ ! -f "$MODEL_DIR/config.json" ]; then
  bash scripts/make_demo_model.sh "$MODEL_DIR"
fi

"$BUILD_DIR/bin/pagoda-server" --model "$MODEL_DIR" --served-model-name demo \
  --host 127.0.0.1 --port "$PORT" --http-port "$HTTP_PORT" --metrics-port "$METRICS_PORT" &
server_pid=$!
stop_server() {
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
}
trap stop_server EXIT
# Ctrl-C (or SIGTERM) is the way to stop the demo: drain the server, exit 0.
trap 'trap - EXIT; stop_server; echo "demo stopped"; exit 0' INT TERM

cli="$BUILD_DIR/bin/pagoda-cli --server 127.0.0.1:$PORT"
for _ in $(seq 1 300); do
  $cli info >/dev/null 2>&1 && break
  kill -0 $server_pid 2>/dev/null || { echo "pagoda-server exited during start-up" >&2; exit 1; }
  sleep 0.1
done
$cli info
echo "--- gRPC: a streamed completion (greedy) ---"
$cli generate --prompt "The quick brown fox" --max-tokens 24 --stream

# Prints an HTTP request as the curl command a user would type, then sends it.
http_demo() {
  local path=$1 body=$2
  echo "\$ curl -s http://127.0.0.1:$HTTP_PORT$path -H 'Content-Type: application/json' -d '$body'"
  curl -sS --fail-with-body "http://127.0.0.1:$HTTP_PORT$path" \
    -H 'Content-Type: application/json' -d "$body"
  echo
}
echo "--- OpenAI HTTP: a completion ---"
http_demo /v1/completions '{"model": "demo", "prompt": "The quick brown fox", "max_tokens": 16}'
echo "--- OpenAI HTTP: a chat completion ---"
http_demo /v1/chat/completions \
  '{"model": "demo", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16}'

if [ "${PAGODA_DEMO_ONCE:-0}" = "1" ]; then
  exit 0
fi
echo "--- serving gRPC on 127.0.0.1:$PORT, OpenAI HTTP on :$HTTP_PORT, metrics on :$METRICS_PORT/metrics; Ctrl-C to stop ---"
# wait returns early when a trapped signal arrives; the trap then exits 0.
set +e
wait "$server_pid"
status=$?
trap - EXIT
exit "$status"
