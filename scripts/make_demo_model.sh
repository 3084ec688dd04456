#!/usr/bin/env bash
# Makes the demo model of the README run command: a random Llama (vocab 512
# with a locally trained sentencepiece tokenizer, hidden 256, 4 layers, 8
# heads, 4 kv heads, intermediate 688, 2048 positions, f16).
#   scripts/make_demo_model.sh [DIR]   (default: models/demo in the repo)
# Extra arguments after DIR go to make_tiny_model.py (e.g. --seed 3).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/models/demo}
shift || true
exec /usr/bin/python3 "$repo/scripts/make_tiny_model.py" --preset demo --out "$out" "$@"
