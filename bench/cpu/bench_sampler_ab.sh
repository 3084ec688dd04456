#!/usr/bin/env bash
# Two bench_cpu_sampler binaries (a tree before a change and after it),
# alternated in one run so that a shared machine's load weighs on both
# alike: for each configuration, REPS runs of each, and the median ms a step
# of plain and of penalized rows, with the ratio before / after. Prints a
# Markdown table and the load average at the start and the end.
#
#   bench/cpu/bench_sampler_ab.sh BEFORE_BIN AFTER_BIN [REPS] [STEPS]
#
# Configurations: ROWS x VOCAB x T (one thread), overridable as
# CONFIGS="rows:vocab:T ..." in the environment; EXTRA="--peak 30" passes
# more flags to both binaries.
set -euo pipefail

before=${1:?before binary}
after=${2:?after binary}
reps=${3:-3}
steps=${4:-100}
configs=${CONFIGS:-"1:8192:0 1:8192:1 1:128256:0 1:128256:1 5:8192:0 5:8192:1 5:128256:0 5:128256:1"}

# The median of the numbers on stdin.
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

echo "load at start: $(uptime | sed 's/.*load average: //')${EXTRA:+, flags: $EXTRA}"
echo "| rows | vocab | T | plain, before | after | ratio | penalties, before | after | ratio |"
echo "|---|---|---|---|---|---|---|---|---|"
for config in $configs; do
  IFS=: read -r rows vocab temperature <<<"$config"
  declare -A plain=() penalized=()
  for rep in $(seq "$reps"); do
    for which in before after; do
      binary=$before
      [[ $which == after ]] && binary=$after
      out=$("$binary" --rows "$rows" --vocab "$vocab" --threads 1 --temperature "$temperature" \
        --steps "$steps" ${EXTRA:-})
      plain[$which]+="$(awk '/without penalties/ {print $3}' <<<"$out") "
      penalized[$which]+="$(awk '/with penalties/ {print $3}' <<<"$out") "
    done
  done
  row="| $rows | $vocab | $temperature"
  for kind in plain penalized; do
    declare -n runs=$kind
    b=$(tr ' ' '\n' <<<"${runs[before]}" | grep . | median)
    a=$(tr ' ' '\n' <<<"${runs[after]}" | grep . | median)
    row+=" | $b | $a | $(awk -v b="$b" -v a="$a" 'BEGIN {printf "%.2fx", b / a}')"
  done
  echo "$row |"
  unset plain penalized
done
echo "load at end: $(uptime | sed 's/.*load average: //')"
