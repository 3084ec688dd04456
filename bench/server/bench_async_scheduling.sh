#!/usr/bin/env bash
# Overlapped scheduling (issue 47), on against off in the same run: a
# host-bound model (one layer, hidden 64, vocab 256, f32 weights) on a CPU
# worker of one thread, --max-num-seqs 1024 --max-num-batched-tokens 16384,
# and pagoda-bench's offline ShareGPT-like trace. Each mode gets a fresh server;
# prints pagoda-bench's table for each, the ratio of output tokens/s, and the
# worker's pagoda_worker_idle_between_steps_seconds histogram for each (the
# worker serves /metrics through a wrapper that adds --metrics-port).
#   BUILD_DIR=build REQUESTS=3000 CONCURRENCY=1000 bench/server/bench_async_scheduling.sh
# BENCH_ARGS (split at spaces, no quoting) go to pagoda-bench in both modes, e.g.
# BENCH_ARGS=--regex=[a-z0-9]+ for structured outputs, whose rows run without
# overlap (docs/architecture.md, "Overlapped scheduling"). CONSTRAINED=N
# runs N more requests beside them, constrained to that regex
# (CONSTRAINED_CONCURRENCY clients, default 100), and prints their figures
# too: what the constrained rows cost in mixed traffic.
# Extra arguments go to both servers (a later flag wins, e.g.
# --kv-cache-dtype float32 for the figures before 2026-12-06 16:30 UTC).
#
# The KV cache is bfloat16. The issue fixes the model's shape and the
# scheduler's limits, not the cache's dtype; vLLM serves a float32
# checkpoint in 16 bits by default (bfloat16 on a CPU), and its KV cache
# follows the serving dtype, so a 16-bit cache is what vLLM would run here.
# It matters because the worker's step is mostly decode attention reading
# K/V (about 70 % of its samples at f32, perf record -g), and the ratio
# on/off is about 1 + server / worker per step: halving the bytes read
# shortens the worker's step for both modes alike.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build}
BIN="$(cd "$BUILD_DIR/bin" && pwd)"
REQUESTS=${REQUESTS:-3000}
CONCURRENCY=${CONCURRENCY:-1000}
PYTHON3=/usr/bin/python3
WORK=$(mktemp -d)
source scripts/server_harness.sh

# A constraint needs a tokenizer that lists its tokens' bytes; without
# BENCH_ARGS the model has none (token ids only, no detokenizing), as before.
CONSTRAINED=${CONSTRAINED:-0}
TOKENIZER=()
[ -n "${BENCH_ARGS:-}" ] || [ "$CONSTRAINED" -gt 0 ] && TOKENIZER=(--tokenizer)
"$PYTHON3" scripts/make_tiny_model.py --out "$WORK/model" --vocab-size 256 --hidden-size 64 \
  --intermediate-size 128 --num-layers 1 --num-heads 4 --num-kv-heads 4 \
  --max-position-embeddings 2048 --dtype f32 "${TOKENIZER[@]}" > /dev/null
# The spawned worker with its own /metrics, which it names in its log.
cat > "$WORK/worker.sh" <<WRAPPER
#!/bin/sh
exec "$BIN/pagoda-worker" --metrics-port=-1 "\$@"
WRAPPER
chmod +x "$WORK/worker.sh"

# Prints the idle histogram of the worker that served the last run.
idle_histogram() {
  local address
  address=$(grep -ao 'metrics on [0-9.]*:[0-9]*' "$WORK/server.log" | tail -1 | awk '{print $3}')
  if [ -z "$address" ]; then
    echo "  (the worker did not report a /metrics address)"
    return
  fi
  curl -s "http://$address/metrics" | "$PYTHON3" -c '
import sys
buckets, total, count = [], 0.0, 0
for line in sys.stdin:
    if not line.startswith("pagoda_worker_idle_between_steps_seconds"):
        continue
    name, value = line.rsplit(" ", 1)
    if "_bucket" in name:
        le = name.split("le=\"")[1].split("\"")[0]
        buckets.append((le, int(float(value))))
    elif name.endswith("_sum") or "_sum{" in name:
        total = float(value)
    elif name.endswith("_count") or "_count{" in name:
        count = int(float(value))
mean = total / count * 1e3 if count else 0.0
print(f"  idle between steps: {count} gaps, mean {mean:.3f} ms, total {total:.2f} s")
previous = 0
for le, cumulative in buckets:
    print(f"    le {le:>8}: {cumulative - previous:8d}")
    previous = cumulative
'
}

# The constrained requests beside the main ones (CONSTRAINED > 0).
constrained_bench() {
  "$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --trace sharegpt --trace-seed 2 \
    --trace-requests "$CONSTRAINED" --concurrency "${CONSTRAINED_CONCURRENCY:-100}" --warmup 1 \
    '--regex=[a-z0-9]+' > "$WORK/constrained_$mode.txt" 2>&1
}

declare -A RATE CONSTRAINED_RATE
for mode in off on; do
  flag=--async-scheduling
  [ "$mode" = off ] && flag=--no-async-scheduling
  start_server "$BIN/pagoda-server" --model "$WORK/model" --max-model-len 2048 \
    --worker-binary "$WORK/worker.sh" --cpu-threads 1 --max-num-seqs 1024 \
    --max-num-batched-tokens 16384 --cpu-kv-cache-space 4 --kv-cache-dtype bfloat16 \
    "$flag" "$@"
  echo "== async scheduling $mode ($flag)"
  constrained_pid=""
  if [ "$CONSTRAINED" -gt 0 ]; then
    constrained_bench &
    constrained_pid=$!
  fi
  "$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --trace sharegpt \
    --trace-requests "$REQUESTS" --concurrency "$CONCURRENCY" --warmup 1 ${BENCH_ARGS:-} | tee "$WORK/bench_$mode.txt"
  RATE[$mode]=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {rate = $6} END {print rate}' "$WORK/bench_$mode.txt")
  if [ -n "$constrained_pid" ]; then
    wait "$constrained_pid"
    echo "  beside them, $CONSTRAINED requests constrained to a regex:"
    grep -E '^ +[0-9]+ +[0-9]+ ' "$WORK/constrained_$mode.txt"
    CONSTRAINED_RATE[$mode]=$(awk '$1 ~ /^[0-9]+$/ && NF >= 6 {rate = $6} END {print rate}' \
      "$WORK/constrained_$mode.txt")
  fi
  idle_histogram
  stop_server
done
"$PYTHON3" -c "
on, off = float('${RATE[on]}'), float('${RATE[off]}')
print(f'output tokens/s: on {on:.0f}, off {off:.0f}, ratio on/off {on / off:.2f}x')"
if [ "$CONSTRAINED" -gt 0 ]; then
  "$PYTHON3" -c "
on, off = float('${CONSTRAINED_RATE[on]}'), float('${CONSTRAINED_RATE[off]}')
print(f'constrained output tokens/s: on {on:.0f}, off {off:.0f}, ratio on/off {on / off:.2f}x')"
fi
