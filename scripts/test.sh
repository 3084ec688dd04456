#!/usr/bin/env bash
# The test command: installs what the build needs, builds everything (the CUDA
# kernels too when nvcc is present) and runs every test with ctest.
#   BUILD_DIR=build  JOBS=$(nproc)  CTEST_ARGS="-R numerics"  scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j "$JOBS"
# Tests run one at a time: several start real server and worker processes and
# check failure detection within seconds, which a loaded 2-core machine blurs.
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 600 ${CTEST_ARGS:-}
