#!/usr/bin/env bash
# Time to first token of a request whose 1,000-token prefix is cached, against
# the same request on a server without prefix caching. Makes the bench model
# (hidden 512, 8 layers, f32), starts pagoda-server twice (caching on, off),
# sends a warm-up request with the 1,000-token prefix and then ROUNDS requests
# sharing that prefix with a fresh 24-token suffix each, and prints the mean
# TTFT of those (from pagoda_time_to_first_token_seconds on /metrics).
#   BUILD_DIR=build ROUNDS=5 scripts/bench_prefix_cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
PYTHON3=/usr/bin/python3
ROUNDS=${ROUNDS:-5}
WORK=$(mktemp -d)
source scripts/server_harness.sh

"$PYTHON3" scripts/make_tiny_model.py --preset bench --max-position-embeddings 2048 --out "$WORK/model" > /dev/null

ids() {  # ids FIRST COUNT: COUNT token ids from a fixed pseudo-random walk.
  "$PYTHON3" -c "import sys; f, n = map(int, sys.argv[1:]); print(','.join(str(3 + (f + i * 37) % 2000) for i in range(n)))" "$1" "$2"
}
PREFIX=$(ids 0 1000)

ttft_sum() {
  curl -s "http://127.0.0.1:$METRICS/metrics" |
    awk '/^pagoda_time_to_first_token_seconds_sum/ {print $2}'
}

run() {  # run LABEL [server flags...]
  local label=$1
  shift
  start_server "$BIN/pagoda-server" --model "$WORK/model" --metrics-port -1 --max-model-len 1100 "$@"
  METRICS=$(server_line PAGODA_METRICS_LISTENING)
  local cli=("$BIN/pagoda-cli" --server "127.0.0.1:$PORT" generate --max-tokens 1)
  "${cli[@]}" --token-ids "$PREFIX,$(ids 5000 24)" > /dev/null  # Warm-up: fills the cache.
  local before after
  before=$(ttft_sum)
  for round in $(seq 1 "$ROUNDS"); do
    "${cli[@]}" --token-ids "$PREFIX,$(ids $((6000 + round * 100)) 24)" > /dev/null
  done
  after=$(ttft_sum)
  curl -s "http://127.0.0.1:$METRICS/metrics" | grep -E "^pagoda_(prompt_tokens|prefix_cache_hits)_total" | sed 's/{.*}//'
  "$PYTHON3" -c "import sys; b, a, n = map(float, sys.argv[1:]); print(f'$label: mean TTFT {1000 * (a - b) / n:.1f} ms over {int(n)} requests of 1,024 tokens (1,000 shared)')" \
    "$before" "$after" "$ROUNDS"
  stop_server
}

run "prefix caching on " --enable-prefix-caching
run "prefix caching off" --no-enable-prefix-caching
