#!/usr/bin/env bash
# Installs every Debian package that Pagoda's build, run and tests need.
# Idempotent: packages already present are skipped by apt.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libgflags-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libopenblas-dev libsentencepiece-dev sentencepiece libgloo-dev
  python3 python3-numpy python3-grpcio python3-protobuf
  openssl  # tests make their own TLS certificates
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
