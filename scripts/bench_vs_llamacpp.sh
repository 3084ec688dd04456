#!/usr/bin/env bash
# Pagoda's CPU worker against llama.cpp on the same weights (issue 45): a
# Llama-3.2-1B-shaped model (make_tiny_model.py's llama1b preset, random
# weights) quantized as AWQ int4 g128 and as compressed-tensors W8A8 int8
# (tests/reference/make_quantized_model.py); for llama.cpp the same
# checkpoints' exactly dequantized weights are written as GGUF
# (scripts/quantized_to_gguf.py, with llama.cpp's own gguf-py) and quantized
# by llama-quantize to Q4_0 and Q8_0. The tied embedding / LM head stays
# BF16 on both sides (pagoda-server --dtype bfloat16; llama-quantize
# --token-embedding-type bf16 --output-tensor-type bf16).
#
# What is compared, for each format, in ROUNDS alternated rounds (Pagoda,
# then llama.cpp, then Pagoda...): requests of a 64-token prompt and 64
# output tokens, THREADS threads, at batch 1 and batch 8, as output tokens
# over wall time, prefill included:
#   - Pagoda through the whole service: pagoda-server (its CPU worker with
#     --cpu-threads THREADS) and pagoda-bench at concurrency 1 and 8
#     (out_tok/s);
#   - llama.cpp: llama-batched-bench -npp 64 -ntg 64 -npl 1,8, which runs 1
#     or 8 sequences of 64 + 64 tokens and reports the whole time T: B * 64 / T
#     is the same figure (no HTTP in front, which only favours llama.cpp).
#     llama-bench -p 64 -n 64 is printed beside it (its prompt and decode
#     speeds measured apart).
# Prints each round, then the medians and the ratios Pagoda / llama.cpp.
#
#   LLAMA_CPP_BIN=/path/llama.cpp/build/bin LLAMA_CPP_SRC=/path/llama.cpp \
#     [BUILD_DIR=build] [THREADS=2] [ROUNDS=3] [FORMATS="awq w8a8"] \
#     [MODEL_ROOT=DIR: keeps the models (about 3 GB each) for later runs] \
#     scripts/bench_vs_llamacpp.sh
# LLAMA_CPP_BIN holds llama-bench, llama-batched-bench and llama-quantize;
# LLAMA_CPP_SRC is llama.cpp's source tree (for its gguf-py). Making the
# models takes 5-20 minutes and up to 18 GB of memory (make_quantized_model.py
# holds the dense model in float64).
set -euo pipefail
cd "$(dirname "$0")/.."

: "${LLAMA_CPP_BIN:?LLAMA_CPP_BIN must name the directory of llama.cpp binaries}"
: "${LLAMA_CPP_SRC:?LLAMA_CPP_SRC must name llama.cpp source tree (its gguf-py)}"
BIN="${BUILD_DIR:-build}/bin"
PYTHON3=/usr/bin/python3
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
PROMPT_LEN=64
MAX_TOKENS=64
WORK=$(mktemp -d)
MODEL_ROOT=${MODEL_ROOT:-$WORK/models}
SERVER_START_SECONDS=${SERVER_START_SECONDS:-300}
source scripts/server_harness.sh
mkdir -p "$MODEL_ROOT"

# The quantized checkpoint and its GGUF for format $1 (awq or w8a8).
make_models() {
  local fmt=$1 dir="$MODEL_ROOT/$1"
  local maker_format=awq gguf_type=Q4_0
  [ "$fmt" = w8a8 ] && maker_format=ct-w8a8 gguf_type=Q8_0
  if [ ! -f "$dir/config.json" ]; then
    "$PYTHON3" tests/reference/make_quantized_model.py --out "$dir" --format "$maker_format" \
      --group-size 128 -- --preset llama1b
  fi
  if [ ! -f "$dir.gguf" ]; then
    "$PYTHON3" scripts/quantized_to_gguf.py --model "$dir" --out "$dir-f32.gguf" \
      --gguf-py "$LLAMA_CPP_SRC/gguf-py"
    "$LLAMA_CPP_BIN/llama-quantize" --token-embedding-type bf16 --output-tensor-type bf16 \
      "$dir-f32.gguf" "$dir.gguf" "$gguf_type" > "$WORK/quantize.log" 2>&1 ||
      { cat "$WORK/quantize.log" >&2; exit 1; }
    rm -f "$dir-f32.gguf"
  fi
}

# pagoda-bench's out_tok/s at concurrency 1 and 8, as "b1 b8".
pagoda_round() {
  "$BIN/pagoda-bench" --server "127.0.0.1:$PORT" --concurrency 1,8 --max-tokens "$MAX_TOKENS" \
    --prompt-len "$PROMPT_LEN" --rounds 1 --warmup 1 > "$WORK/pagoda.out"
  awk '$1 == 1 {b1 = $6} $1 == 8 {b8 = $6} END {print b1, b8}' "$WORK/pagoda.out"
}

# llama-batched-bench's B * TG / T at 1 and 8 sequences, as "b1 b8".
llamacpp_round() {
  "$LLAMA_CPP_BIN/llama-batched-bench" -m "$1" -c 2048 -npp "$PROMPT_LEN" -ntg "$MAX_TOKENS" \
    -npl 1,8 -t "$THREADS" > "$WORK/batched.out" 2>&1
  awk -F'|' '$2 + 0 == '"$PROMPT_LEN"' && $3 + 0 == '"$MAX_TOKENS"' {
      rate[$4 + 0] = $4 * $3 / $10 }
    END {printf "%.2f %.2f\n", rate[1], rate[8]}' "$WORK/batched.out"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $THREADS threads, prompt $PROMPT_LEN + $MAX_TOKENS output tokens, $ROUNDS rounds"
for fmt in ${FORMATS:-awq w8a8}; do
  make_models "$fmt"
  gguf_name=Q4_0
  [ "$fmt" = w8a8 ] && gguf_name=Q8_0
  start_server "$BIN/pagoda-server" --model "$MODEL_ROOT/$fmt" --dtype bfloat16 \
    --cpu-threads "$THREADS" --max-model-len 256
  : > "$WORK/rounds"
  for round in $(seq 1 "$ROUNDS"); do
    read -r p1 p8 < <(pagoda_round)
    read -r l1 l8 < <(llamacpp_round "$MODEL_ROOT/$fmt.gguf")
    echo "$fmt round $round: pagoda $p1 / $p8 tok/s, llama.cpp $gguf_name $l1 / $l8 tok/s (batch 1 / 8), load $(cut -d' ' -f1 /proc/loadavg)"
    echo "$p1 $p8 $l1 $l8" >> "$WORK/rounds"
  done
  stop_server
  "$LLAMA_CPP_BIN/llama-bench" -m "$MODEL_ROOT/$fmt.gguf" -p "$PROMPT_LEN" -n "$MAX_TOKENS" \
    -t "$THREADS" -r 2 2>/dev/null | grep -E "pp$PROMPT_LEN|tg$MAX_TOKENS" || true
  for col in 1 2 3 4; do
    medians[$col]=$(awk -v c=$col '{print $c}' "$WORK/rounds" | median)
  done
  awk -v f="$fmt" -v g="$gguf_name" -v p1="${medians[1]}" -v p8="${medians[2]}" \
    -v l1="${medians[3]}" -v l8="${medians[4]}" 'BEGIN {
      printf "%s vs %s medians: batch 1 pagoda %.2f, llama.cpp %.2f tok/s: %.2fx; ", f, g, p1, l1, p1 / l1
      printf "batch 8 pagoda %.2f, llama.cpp %.2f tok/s: %.2fx\n", p8, l8, p8 / l8 }'
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
