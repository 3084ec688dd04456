#!/usr/bin/env bash
# Prints one 12-digit hash of the contents of the files listed in LIST (one
# path a line, relative to the current directory; `git ls-files` output), so
# that scripts/gpu_bundle.sh and scripts/gpu_check.sh hash a tree the same
# way. A listed file that is missing is skipped, and so changes the hash.
#   scripts/tracked_tree_hash.sh LIST
set -euo pipefail
tr '\n' '\0' <"$1" | (xargs -0 cat 2>/dev/null; true) | sha1sum | cut -c1-12
