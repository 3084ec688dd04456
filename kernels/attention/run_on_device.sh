#!/bin/sh
# Builds the attention kernels, runs their tests and the benchmark on a device
# machine (H200). Usage from the repo root:  sh kernels/attention/run_on_device.sh
# Writes logs under $OUT when set. CMake 3.25 lacks nvcc's C++20 flag, hence the
# rules override (see the report/notes).
set -e
OUT=${OUT:-/tmp/attention_out}
mkdir -p "$OUT"
RULES="$OUT/cuda20_rules.cmake"
printf 'set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")\nset(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")\n' > "$RULES"
cmake -S . -B build-attn-device -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_USER_MAKE_RULES_OVERRIDE_CUDA="$RULES" > "$OUT/configure.log" 2>&1
cmake --build build-attn-device -j16 --target attention_plan_test attention_reference_test \
  decode_attention_test prefill_attention_test bench_paged_attention > "$OUT/build.log" 2>&1
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
for t in attention_plan_test attention_reference_test decode_attention_test prefill_attention_test; do
  ./build-attn-device/bin/$t > "$OUT/$t.log" 2>&1 && echo "$t: PASS" || { echo "$t: FAIL"; tail -30 "$OUT/$t.log"; }
done
./build-attn-device/bin/bench_paged_attention | tee "$OUT/bench.txt"
/usr/bin/python3 kernels/attention/bench_sdpa_baseline.py 2>&1 | tee "$OUT/sdpa.txt" || true
python3 kernels/attention/bench_sdpa_baseline.py 2>&1 | tee -a "$OUT/sdpa.txt" || true
