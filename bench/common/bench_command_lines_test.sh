#!/usr/bin/env bash
# Every benchmark program's command line, without running a benchmark:
# --help prints a usage and exits 0; an unknown flag, and more positional
# arguments than any program takes, are refused with exit status 1 before
# any work starts. Usage: bench_command_lines_test.sh BINARY...
set -uo pipefail

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

for binary in "$@"; do
  name=$(basename "$binary")
  out=$("$binary" --help 2>&1)
  rc=$?
  [[ $rc == 0 && $out == *usage:* ]] || fail "$name --help: exit $rc, output: ${out:0:200}"
  out=$("$binary" --no-such-flag 2>&1)
  rc=$?
  [[ $rc == 1 ]] || fail "$name --no-such-flag: exit $rc (want 1), output: ${out:0:200}"
  out=$("$binary" 1 1 1 1 1 1 1 1 1 2>&1)
  rc=$?
  [[ $rc == 1 ]] || fail "$name with nine positional arguments: exit $rc (want 1)"
done
echo "$# programs, $failures failures"
[[ $failures == 0 ]]
