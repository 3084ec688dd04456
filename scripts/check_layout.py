#!/usr/bin/python3
"""Checks the layout rules of docs/architecture.md on the source tree.

1. Arrows: each room includes only the rooms it may depend on (the table
   FORBIDDEN below). Every file outside tests/ is checked, its own tests
   included; only test files (*_test.cc, */testing/*) may include tests/.
2. Length: no function outside tests, device kernels (kernels/**/*.cu, .cuh)
   and generated code is longer than MAX_FUNCTION_LINES, as universal-ctags
   measures it (first to last line of its definition).

Usage: scripts/check_layout.py [REPO_DIR]. Prints each violation and exits 1
if there is any; prints a one-line summary and exits 0 otherwise.
"""

import os
import re
import subprocess
import sys

MAX_FUNCTION_LINES = 60
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
PRODUCT_ROOTS = ("common", "text", "wire", "scheduler", "worker", "kernels", "cli")

# (room, rooms it must not include). A room is a path prefix; every rule
# whose room is a prefix of a file's path applies to it. TEST_EXEMPT rooms'
# rules do not bind their own tests (the block manager's test drives it with
# the engine's real sequences).
TEST_EXEMPT = ("scheduler/kv/", "scheduler/kv_events/")
FORBIDDEN = [
    ("common/", ["text/", "wire/", "scheduler/", "worker/", "kernels/", "cli/"]),
    ("text/", ["wire/", "scheduler/", "worker/", "kernels/", "cli/"]),
    ("wire/", ["text/", "scheduler/", "worker/", "kernels/", "cli/"]),
    ("kernels/", ["text/", "wire/", "scheduler/", "worker/", "cli/"]),
    ("worker/", ["text/", "scheduler/", "cli/"]),
    ("scheduler/", ["worker/", "kernels/", "cli/"]),
    ("scheduler/kv/", ["scheduler/engine/", "scheduler/api/", "scheduler/workers/",
                       "scheduler/metrics", "scheduler/constraints/"]),
    ("scheduler/kv_events/", ["scheduler/engine/", "scheduler/api/", "scheduler/workers/",
                              "scheduler/metrics", "scheduler/constraints/"]),
    ("scheduler/engine/", ["scheduler/api/", "scheduler/metrics", "scheduler/kv_events/"]),
    ("scheduler/workers/", ["scheduler/engine/", "scheduler/api/", "scheduler/kv/",
                            "scheduler/constraints/"]),
    # Grammars and token masks: the engine and the API use them; they know
    # nothing of either, nor of the tokenizer (token bytes come in as data).
    ("scheduler/constraints/", ["text/", "wire/", "scheduler/engine/", "scheduler/api/",
                                "scheduler/workers/", "scheduler/kv/", "scheduler/sim/",
                                "scheduler/metrics", "scheduler/kv_events/"]),
    # LoRA's server side (flags, registry, slot policy): pure, used by the
    # engine and the API, knowing neither.
    ("scheduler/lora/", ["text/", "wire/", "scheduler/engine/", "scheduler/api/",
                         "scheduler/workers/", "scheduler/kv/", "scheduler/kv_events/",
                         "scheduler/constraints/", "scheduler/sim/", "scheduler/metrics"]),
    ("cli/", ["text/", "wire/", "scheduler/", "worker/", "kernels/"]),
]

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def is_test_file(path):
    name = os.path.basename(path)
    return (name.endswith("_test.cc") or "/testing/" in path or path.startswith("tests/")
            or name.startswith("bench_sdpa"))


def source_files(repo):
    for root in PRODUCT_ROOTS:
        for dirpath, _, names in os.walk(os.path.join(repo, root)):
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), repo)


def forbidden_for(path):
    rules = []
    for room, targets in FORBIDDEN:
        if path.startswith(room) and not (room in TEST_EXEMPT and is_test_file(path)):
            rules.extend(targets)
    return rules


def check_arrows(repo, files):
    problems = []
    for path in files:
        with open(os.path.join(repo, path), encoding="utf-8") as source:
            text = source.read()
        targets = forbidden_for(path)
        for included in INCLUDE.findall(text):
            if included.startswith("tests/") and not is_test_file(path):
                problems.append(f"{path}: product code includes test code {included}")
            for target in targets:
                own_room = path.startswith(target)
                if included.startswith(target) and not own_room:
                    problems.append(f"{path}: forbidden arrow to {included}")
    return problems


def check_lengths(repo, files):
    checked = [f for f in files
               if not is_test_file(f) and not (f.startswith("kernels/")
                                               and f.endswith((".cu", ".cuh")))]
    out = subprocess.run(
        ["ctags", "--languages=C++", "--langmap=C++:+.cu.cuh", "--kinds-C++=f",
         "--fields=+ne", "-o", "-"] + checked,
        cwd=repo, check=True, capture_output=True, text=True).stdout
    problems = []
    for line in out.splitlines():
        fields = line.split("\t")
        extra = dict(f.split(":", 1) for f in fields[3:] if ":" in f)
        if "line" not in extra or "end" not in extra:
            continue
        length = int(extra["end"]) - int(extra["line"]) + 1
        if length > MAX_FUNCTION_LINES:
            problems.append(f"{fields[1]}:{extra['line']}: {fields[0]} is {length} lines "
                            f"(at most {MAX_FUNCTION_LINES})")
    return problems, len(checked)


def main():
    repo = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    files = list(source_files(repo))
    problems = check_arrows(repo, files)
    length_problems, measured = check_lengths(repo, files)
    problems += length_problems
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_layout: {len(problems)} violation(s)")
        return 1
    print(f"check_layout: {len(files)} files, no forbidden arrow; {measured} measured, "
          f"no function over {MAX_FUNCTION_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
