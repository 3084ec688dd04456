#!/usr/bin/env bash
# Latency under load (issue 20): a real pagoda-server on loopback with a
# make_tiny_model.py model (MODEL_ARGS; default: hidden 128, 4 layers,
# vocab 512, 4096 positions, f32: small enough that a 2-core CPU keeps up
# with a 2,048-token prompt every 2 s), then pagoda-bench --mixed: STREAMS
# streams decoding CONTEXT-token prompts (STREAM_TOKENS tokens a request,
# then the next request; default 128) while a LONG-token prompt arrives
# every EVERY seconds, for DURATION seconds. Prints TTFT and inter-token
# latency p50/p90/p99 per class and writes PLOT (SVG; default mixed_itl.svg,
# PLOT= for none). With URGENT_EVERY, 64-token requests of priority -1
# arrive that often as well (the rest are priority 0), and their TTFT is
# taken on the idle server first.
#   STREAMS=16 CONTEXT=256 LONG=2048 EVERY=2 DURATION=60 PLOT=itl.svg \
#     scripts/bench_mixed.sh [server flags, e.g. --no-enable-chunked-prefill]
#   STREAMS=48 EVERY=0 URGENT_EVERY=1 scripts/bench_mixed.sh \
#     --scheduling-policy priority --max-num-seqs 16
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
WORK=$(mktemp -d)
source scripts/server_harness.sh

# shellcheck disable=SC2086
/usr/bin/python3 scripts/make_tiny_model.py \
  ${MODEL_ARGS:---hidden-size 128 --intermediate-size 344 --num-layers 4 --num-heads 4 --vocab-size 512 --max-position-embeddings 4096} \
  --out "$WORK/model" > /dev/null
start_server "$BIN/pagoda-server" --model "$WORK/model" "$@"
"$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --mixed --mixed-streams "${STREAMS:-16}" \
  --mixed-context "${CONTEXT:-256}" --mixed-stream-tokens "${STREAM_TOKENS:-128}" \
  --mixed-long-prompt "${LONG:-2048}" \
  --mixed-long-every "${EVERY:-2}" --mixed-duration "${DURATION:-60}" \
  --mixed-urgent-every "${URGENT_EVERY:-0}" --mixed-plot "${PLOT-mixed_itl.svg}"
