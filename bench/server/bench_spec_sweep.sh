#!/usr/bin/env bash
# Speculative decoding over k and batch size, end to end (issue 46): where
# prompt lookup stops paying, which is what disable_by_batch_size is for.
# The model is the b1 preset (32.5 M parameters, f32) on the CPU worker. Its
# lm_head keeps only its first LIVE rows (the others are zeroed), so greedy
# decoding wanders over a small alphabet and prompt lookup's drafts are
# right part of the time; LIVE=0 zeroes it all (every draft right: the
# ceiling), LIVE=all keeps it (next to no draft right). For each batch B in
# BATCHES (B pagoda-bench clients at once, one request of TOKENS tokens
# each), a server without speculation and one per k in KS (ngram,
# prompt_lookup_min 1, max 4, disable_by_batch_size out of the way), each
# fresh, ROUNDS times alternated, so a busy machine slows both alike. Prints one row per (B, k): the medians of
# output tokens/s off and on, their ratio, the acceptance the server counted
# (accepted / proposed drafts) and the output tokens per sequence-step, with
# the load average at the start of each batch. SPEC_LIMIT replaces the
# disable_by_batch_size key, e.g. with a k-by-batch-size schedule
# ('"num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 16, 2], [17, 4096, 0]]',
# with KS=4) to compare it with plain decoding in the same run.
#   BUILD_DIR=build ROUNDS=2 TOKENS=128 BATCHES="1 8 32" KS="1 2 4 6" LIVE=128 \
#     bench/server/bench_spec_sweep.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
PYTHON3=/usr/bin/python3
ROUNDS=${ROUNDS:-2}
TOKENS=${TOKENS:-128}
BATCHES=${BATCHES:-1 8 32}
KS=${KS:-1 2 4 6}
LIVE=${LIVE:-128}
SPEC_LIMIT=${SPEC_LIMIT:-'"disable_by_batch_size": 4096'}
THREADS=${THREADS:-2}
WORK=$(mktemp -d)
source scripts/server_harness.sh

"$PYTHON3" scripts/make_tiny_model.py --preset b1 --out "$WORK/model" > /dev/null
if [ "$LIVE" != all ]; then
  # Zeroes lm_head rows LIVE.. (safetensors: an 8-byte header length, the
  # JSON header, then the raw f32 tensors).
  "$PYTHON3" - "$WORK/model" "$LIVE" <<'EOF'
import glob, json, struct, sys
live = int(sys.argv[2])
for path in glob.glob(sys.argv[1] + "/*.safetensors"):
    with open(path, "r+b") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        if "lm_head.weight" in header:
            tensor = header["lm_head.weight"]
            begin, end = tensor["data_offsets"]
            kept = min(live * tensor["shape"][1] * 4, end - begin)
            f.seek(8 + size + begin + kept)
            f.write(bytes(end - begin - kept))
EOF
fi

# "tok/s steps" of one pagoda-bench run at batch $1.
measure() {
  "$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --concurrency "$1" --rounds 1 \
    --prompt_len 16 --max_tokens "$TOKENS" --warmup 1 --temperature 0 |
    awk -v batch="$1" '$1 == batch {print $6, $7, $8}'
}

metric() {
  curl -s "http://127.0.0.1:$METRICS/metrics" | awk -v name="$1" '$1 ~ "^"name {s += $2} END {print s + 0}'
}

# serve K: starts a server, ngram with K drafts, or none for K = 0.
serve() {
  local flags=(--model "$WORK/model" --cpu-threads "$THREADS" --max-model-len 1024
    --metrics-port -1 --max-num-seqs 64)
  if [ "$1" != 0 ]; then
    # SPEC_LIMIT's default, disable_by_batch_size above every batch: the
    # sweep measures where its default should sit, so it must not apply it.
    flags+=(--speculative-config "{\"method\": \"ngram\", \"num_speculative_tokens\": $1, \"prompt_lookup_min\": 1, \"prompt_lookup_max\": 4, $SPEC_LIMIT}")
  fi
  start_server "$BIN/pagoda-server" "${flags[@]}"
  METRICS=$(server_line PAGODA_METRICS_LISTENING)
}

RESULTS="$WORK/results"
echo "lm_head rows kept: $LIVE, $TOKENS tokens a request, medians of $ROUNDS rounds, $(nproc) cores"
for batch in $BATCHES; do
  echo "batch $batch: $(uptime | sed 's/.*load/load/')"
  for round in $(seq 1 "$ROUNDS"); do
    for k in 0 $KS; do
      serve "$k"
      read -r tps steps mean_batch <<< "$(measure "$batch")"
      # Drafts of the warmup request count too: the acceptance is the
      # server's over its whole life, as its metrics say.
      echo "$batch $k $tps $steps $mean_batch $(metric vllm:spec_decode_num_draft_tokens_total)" \
        "$(metric vllm:spec_decode_num_accepted_tokens_total)" >> "$RESULTS"
      stop_server
    done
  done
done
"$PYTHON3" - "$RESULTS" "$TOKENS" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    batch, k, tps, steps, mean_batch, drafts, accepted = line.split()
    rows[(int(batch), int(k))].append((float(tps), float(steps), float(mean_batch),
                                       float(drafts), float(accepted)))
tokens = int(sys.argv[2])
print(f"{'batch':>5} {'k':>3} {'off_tok/s':>10} {'on_tok/s':>10} {'ratio':>7} "
      f"{'accepted':>9} {'tok/seq-step':>12}")
for (batch, k), runs in sorted(rows.items()):
    if k == 0:
        continue
    off = statistics.median(r[0] for r in rows[(batch, 0)])
    on = statistics.median(r[0] for r in runs)
    drafts = sum(r[3] for r in runs)
    accepted = sum(r[4] for r in runs)
    # Output tokens per sequence per step: tokens over steps times the mean
    # batch, the prefill's first token included.
    per_step = statistics.median(batch * tokens / (r[1] * r[2]) for r in runs)
    rate = accepted / drafts if drafts else 0.0
    print(f"{batch:>5} {k:>3} {off:>10.1f} {on:>10.1f} {on / off:>6.2f}x {rate:>9.2f} "
          f"{per_step:>12.2f}")
EOF
