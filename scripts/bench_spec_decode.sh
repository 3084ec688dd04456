#!/usr/bin/env bash
# Speculative decoding's ceiling, end to end (issue 46): batch 1 on the CPU
# worker, k = 4 n-gram drafts, every draft right. The model is the b1 preset
# (32.5 M parameters, f32) with its lm_head zeroed: every logit ties, greedy
# decoding repeats token 0, and prompt lookup's drafts are always accepted;
# each step still reads every weight, as a real model's does. pagoda-server
# runs twice, speculation off and on (--speculative-config), each serving
# ROUNDS requests of one client (pagoda-bench --concurrency 1), the servers
# alternated ROUNDS times so a busy machine slows both alike; prints each
# round's output tokens/s, the acceptance the server counted, and the ratio
# of the medians (goal: >= 2.5x). BATCH clients at once instead of one show
# where speculation stops paying even at full acceptance (decode turns
# compute bound), which disable_by_batch_size should sit below (set above
# every batch here, so its default does not stop the drafts).
# METHOD=draft_model runs a draft model instead of prompt lookup, at full
# acceptance too: DRAFT=small (default) a one-layer b1 of hidden 128 with
# its lm_head zeroed (it proposes token 0, as the target decodes), DRAFT=self
# the target as its own draft (k + 1 draft passes of the whole model a step:
# the method's cost, not a speedup).
# METHOD=eagle runs a random EAGLE head (tests/reference/eagle_reference.py
# make over a one-layer b1): it shares the target's zeroed lm_head, so it
# too proposes token 0 and every draft is right (the ceiling: the figure
# is the head's cost, k passes of one layer, fc and lm_head a step).
# ZERO_LM_HEAD=0 keeps the target's random lm_head: a random head is then
# almost never right (the floor: what proposing costs when nothing is
# accepted).
#   BUILD_DIR=build ROUNDS=3 TOKENS=256 [BATCH=1 K=4 METHOD=ngram|draft_model|eagle
#     DRAFT=small|self ZERO_LM_HEAD=1|0] scripts/bench_spec_decode.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
BIN="$BUILD_DIR/bin"
PYTHON3=/usr/bin/python3
ROUNDS=${ROUNDS:-3}
TOKENS=${TOKENS:-256}
K=${K:-4}
THREADS=${THREADS:-2}
BATCH=${BATCH:-1}
METHOD=${METHOD:-ngram}
DRAFT=${DRAFT:-small}
ZERO_LM_HEAD=${ZERO_LM_HEAD:-1}
WORK=$(mktemp -d)
source scripts/server_harness.sh

# Zeroes lm_head.weight of model directory $1 in place (safetensors: an
# 8-byte header length, the JSON header, then the raw tensors).
zero_lm_head() {
  "$PYTHON3" - "$1" <<'EOF'
import glob, json, struct, sys
for path in glob.glob(sys.argv[1] + "/*.safetensors"):
    with open(path, "r+b") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        if "lm_head.weight" in header:
            begin, end = header["lm_head.weight"]["data_offsets"]
            f.seek(8 + size + begin)
            f.write(bytes(end - begin))
EOF
}

"$PYTHON3" scripts/make_tiny_model.py --preset b1 --out "$WORK/model" > /dev/null
if [ "$ZERO_LM_HEAD" = 1 ]; then zero_lm_head "$WORK/model"; fi

LABEL=$METHOD
if [ "$METHOD" = draft_model ]; then
  LABEL="draft_model ($DRAFT)"
  DRAFT_DIR="$WORK/model"
  if [ "$DRAFT" = small ]; then
    DRAFT_DIR="$WORK/draft"
    "$PYTHON3" scripts/make_tiny_model.py --preset b1 --num-layers 1 --hidden-size 128 \
      --intermediate-size 384 --num-heads 2 --num-kv-heads 1 --seed 3 --out "$DRAFT_DIR" > /dev/null
    zero_lm_head "$DRAFT_DIR"
  fi
  SPEC="{\"model\": \"$DRAFT_DIR\", \"num_speculative_tokens\": $K, \"disable_by_batch_size\": 4096}"
elif [ "$METHOD" = eagle ]; then
  LABEL="eagle (random head, lm_head zeroed: $ZERO_LM_HEAD)"
  "$PYTHON3" scripts/make_tiny_model.py --preset b1 --num-layers 1 --seed 3 \
    --out "$WORK/head_source" > /dev/null
  "$PYTHON3" tests/reference/eagle_reference.py make --source "$WORK/head_source" \
    --out "$WORK/head"
  SPEC="{\"method\": \"eagle\", \"model\": \"$WORK/head\", \"num_speculative_tokens\": $K, \"disable_by_batch_size\": 4096}"
else
  SPEC="{\"method\": \"ngram\", \"num_speculative_tokens\": $K, \"disable_by_batch_size\": 4096, \"prompt_lookup_min\": 1, \"prompt_lookup_max\": 4}"
fi

# tokens/s of one pagoda-bench run (BATCH clients, one request of TOKENS each).
measure() {
  "$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --concurrency "$BATCH" --rounds 1 \
    --prompt_len 16 --max_tokens "$TOKENS" --warmup 1 --temperature 0 |
    awk -v batch="$BATCH" '$1 == batch {print $6}'
}

metric() {
  curl -s "http://127.0.0.1:$METRICS/metrics" | awk -v name="$1" '$1 ~ "^"name {s += $2} END {print s + 0}'
}

declare -a OFF ON
for round in $(seq 1 "$ROUNDS"); do
  start_server "$BIN/pagoda-server" --model "$WORK/model" --cpu-threads "$THREADS" \
    --max-model-len 1024 --metrics-port -1
  OFF+=("$(measure)")
  stop_server
  start_server "$BIN/pagoda-server" --model "$WORK/model" --cpu-threads "$THREADS" \
    --max-model-len 1024 --metrics-port -1 --speculative-config "$SPEC"
  METRICS=$(server_line PAGODA_METRICS_LISTENING)
  ON+=("$(measure)")
  DRAFTS=$(metric vllm:spec_decode_num_draft_tokens_total)
  ACCEPTED=$(metric vllm:spec_decode_num_accepted_tokens_total)
  stop_server
  echo "round $round: off ${OFF[-1]} tok/s, on ${ON[-1]} tok/s (drafts accepted $ACCEPTED of $DRAFTS)"
done
"$PYTHON3" -c "
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
print(f'$LABEL, batch $BATCH, k = $K, $TOKENS tokens: off {statistics.median(off):.1f} tok/s, '
      f'on {statistics.median(on):.1f} tok/s, ratio {statistics.median(on) / statistics.median(off):.2f}x (medians of $ROUNDS)')
" "${OFF[*]}" "${ON[*]}"
