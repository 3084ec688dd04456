#!/usr/bin/env bash
# Generates the gRPC Python modules of Pagoda's client API (and of the health
# service) into OUT_DIR with Debian's protoc and grpc_python_plugin.
#   clients/python/generate_stubs.sh OUT_DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: generate_stubs.sh OUT_DIR}"
mkdir -p "$out"
plugin="${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin)}"
protoc -I "$root/proto" -I "$root/clients/proto" \
  --python_out="$out" --grpc_out="$out" --plugin=protoc-gen-grpc="$plugin" \
  pagoda/v1/generation.proto pagoda_health/health.proto
# protoc writes no package markers; Python 3 namespace packages do without.
