#!/usr/bin/env bash
# Builds the CUDA worker and its GPU tests HERE (nvcc, sm_90) and packs what
# the lent GPU machine needs to run them into one git-ignored tarball,
# .gpu-bundle/pagoda-gpu.tar.xz, for scripts/gpu_check.sh to unpack there.
#
# Why: that machine has CUDA 13, CMake, ninja and python3 (numpy, torch) but
# none of the Debian C++ libraries the full project links (gRPC, Abseil,
# protobuf, glog, GoogleTest...) and no network. So the binaries
# are built here and travel with every shared library they load except
# - glibc (libc, libm, libpthread, libdl, librt, the loader) and libstdc++ /
#   libgcc_s: the GPU machine's own (Ubuntu 24.04, glibc 2.39, is newer than
#   this Debian 12's 2.36, and both are backward compatible). They travel too,
#   in lib-glibc/, for a machine whose glibc is older: gpu_check.sh then runs
#   each test through the bundled loader (ld-linux-x86-64.so.2 --library-path).
# - the CUDA driver (libcuda) and everything under /usr/local/cuda (cudart,
#   cuBLAS, cuBLASLt, NCCL): the machine's CUDA 13.0 is this nvcc's, and its
#   NCCL comes with its PyTorch (gpu_check.sh adds both to the library path).
#   NCCL is pointed at, never carried: libnccl.so.2 is ~210 MiB, far over the
#   64 MiB the device tool carries. The worker needs only NCCL >= 2.14's API
#   (non-blocking init, ncclCommAbort); headers here are 2.28.
# Test binaries keep the absolute paths they were built with (ctest files,
# PAGODA_WORKER_BINARY...): gpu_check.sh links those paths to where the
# bundle lands.
#
# Usage (in the repository root, once per change of the CUDA worker):
#   (.gpu-bundle/ is in .gitignore)
#   scripts/gpu_bundle.sh          # builds build/ (JOBS=2), then packs
# then run(command="scripts/gpu_check.sh", carry=[".gpu-bundle"], timeout_s=600).
#
# Environment: BUILD_DIR (build), JOBS (2), SKIP_BUILD=1 (pack what is built),
# BUNDLE_DIR (.gpu-bundle). Prints the tarball's size; fails above 56 MiB (the
# device tool carries 64 MiB a call, the working tree included).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-2}
BUNDLE_DIR=${BUNDLE_DIR:-.gpu-bundle}
LIMIT_BYTES=$((56 << 20))
BUILD_ABS=$(cd "$BUILD_DIR" 2>/dev/null && pwd || echo "$REPO/$BUILD_DIR")

if [ ! -f "$BUILD_ABS/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  BUILD_ABS=$(cd "$BUILD_DIR" && pwd)
fi
grep -q '^PAGODA_HAVE_CUDA:INTERNAL=ON' "$BUILD_ABS/CMakeCache.txt" 2>/dev/null ||
  grep -q 'Pagoda CUDA backend: ON' "$BUILD_ABS/CMakeFiles/CMakeOutput.log" 2>/dev/null ||
  [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu_bundle: no nvcc: nothing to bundle" >&2; exit 1; }

# What gpu_check.sh runs: every test labelled cuda, the servers, the benchmarks
# (pagoda-bench drives its service throughput step, so it must travel too).
mapfile -t tests < <(ctest --test-dir "$BUILD_ABS" -N -L cuda | sed -n 's/^ *Test *#[0-9]*: //p')
targets=("${tests[@]}" pagoda-server pagoda-worker pagoda-cli pagoda-bench bench_paged_attention
         bench_cache_ops bench_fp8_linear bench_int4_linear bench_decode_step bench_lora_step)
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmake --build "$BUILD_ABS" -j "$JOBS" --target "${targets[@]}"
fi

STAGE=$(mktemp -d /tmp/pagoda-gpu-bundle.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/build" "$STAGE/lib" "$STAGE/lib-glibc"
# The build tree's ctest files (paths relative to the build dir).
(cd "$BUILD_ABS" && find . -name CTestTestfile.cmake -print0 |
  xargs -0 -I{} cp --parents {} "$STAGE/build/")
binaries=()
for t in "${targets[@]}"; do
  f="$BUILD_ABS/bin/$t"
  [ -x "$f" ] || { echo "gpu_bundle: $t not built ($f)" >&2; exit 1; }
  mkdir -p "$STAGE/build/bin"
  cp "$f" "$STAGE/build/bin/$t"
  strip --strip-unneeded "$STAGE/build/bin/$t"
  binaries+=("$f")
done
# Shared libraries the project builds itself (the sentencepiece shim...).
while IFS= read -r so; do
  rel=${so#"$BUILD_ABS"/}
  mkdir -p "$STAGE/build/$(dirname "$rel")"
  cp -L "$so" "$STAGE/build/$rel"
  binaries+=("$so")
done < <(find "$BUILD_ABS" -name 'lib*.so*' -not -path '*/CMakeFiles/*' -type f)
# The binaries look for the sentencepiece shim beside them, in ../lib, then at
# the path they were built with (text/sentencepiece_adapter.cc). That path is
# not there on the GPU machine, so the shim goes where an installed one would.
mkdir -p "$STAGE/build/lib"
cp "$STAGE/build/text/libpagoda_sentencepiece_shim.so" "$STAGE/build/lib/"

# Every library the binaries load, by where ldd resolves it.
declare -A seen=()
while IFS= read -r line; do
  path=$(sed -n 's/.*=> \(\/[^ ]*\) (0x.*/\1/p; s/^\s*\(\/[^ ]*\) (0x.*/\1/p' <<<"$line")
  [ -n "$path" ] && [ -z "${seen[$path]:-}" ] || continue
  seen[$path]=1
  name=$(basename "$path")
  case "$path" in /usr/local/cuda*) continue ;; esac  # Toolkit libs (NCCL too): the machine's.
  case "$name" in
    libcuda.so* | libcudart.so* | libcublas*.so* | libnccl*.so* | libnvidia*) ;;  # The machine's.
    ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libstdc++.so* | libgcc_s.so*)
      cp -L "$path" "$STAGE/lib-glibc/$name" ;;
    *) cp -L "$path" "$STAGE/lib/$name" ;;
  esac
done < <(for b in "${binaries[@]}"; do ldd "$b"; done)
strip --strip-unneeded "$STAGE"/lib/*.so* 2>/dev/null || true

# The structured-outputs suite in CUDA mode (gpu_check.sh's "structured"
# group). That machine has no spm_train to make the suite's model and no
# python3-jsonschema to validate its outputs, so both are made or taken here:
# the model as the suite makes it for CUDA, and Debian's python3-jsonschema
# with the pure-Python packages it imports (pyrsistent's optional C part
# stays behind: it falls back to Python, as on any other interpreter).
PAGODA_E2E_DEVICE=cuda /usr/bin/python3 tests/constraints/structured_outputs_e2e_test.py \
  --make-model "$STAGE/models/structured-outputs"
mkdir -p "$STAGE/python"
/usr/bin/python3 -c 'import os, jsonschema, attr, attrs, pyrsistent
print("\n".join(os.path.dirname(m.__file__) for m in (jsonschema, attr, attrs, pyrsistent)))' |
  while IFS= read -r package; do cp -r "$package" "$STAGE/python/"; done
find "$STAGE/python" -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$STAGE/python/jsonschema/tests" "$STAGE/python/jsonschema/benchmarks"

git_rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
# The tracked files and one hash of their contents as they are now, for
# gpu_check.sh to tell whether the checkout it runs in is this tree (the
# device copy's .git can lag its files, so its HEAD says nothing).
git ls-files >"$STAGE/tracked_files.txt"
tree_hash=$(scripts/tracked_tree_hash.sh "$STAGE/tracked_files.txt")
cat >"$STAGE/bundle.env" <<ENV
PAGODA_BUNDLE_SOURCE_DIR=$REPO
PAGODA_BUNDLE_BUILD_DIR=$BUILD_ABS
PAGODA_BUNDLE_GIT_REV=$git_rev
PAGODA_BUNDLE_DIRTY=$(git status --porcelain --untracked-files=no 2>/dev/null | grep -c . || true)
PAGODA_BUNDLE_GLIBC=$(ldd --version | head -1 | awk '{print $NF}')
PAGODA_BUNDLE_TREE_HASH=$tree_hash
ENV

mkdir -p "$BUNDLE_DIR"
out="$BUNDLE_DIR/pagoda-gpu.tar.xz"
tar -C "$STAGE" -cf - . | xz -T0 -6 >"$out.tmp"
mv "$out.tmp" "$out"
size=$(stat -c %s "$out")
echo "gpu_bundle: $out $((size >> 20)) MiB ($size bytes): ${#targets[@]} binaries," \
  "$(ls "$STAGE/lib" | wc -l) libraries, $(du -sh "$STAGE" | cut -f1) unpacked, rev ${git_rev:0:12}"
if [ "$size" -gt "$LIMIT_BYTES" ]; then
  echo "gpu_bundle: larger than $((LIMIT_BYTES >> 20)) MiB: the device tool would refuse it" >&2
  exit 1
fi
