"""scripts/check_layout.py fails on a forbidden arrow and on a long function,
and passes a tree that has neither (so the layout_check test can fail)."""
import os
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "check_layout.py")


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def check(root):
    return subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True)


def function(name, body_lines):
    return "int %s() {\n%s  return 0;\n}\n" % (name, "  int x = 0;\n" * body_lines)


class CheckLayoutTest(unittest.TestCase):

    def test_clean_tree_passes(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/engine/engine.cc",
                  '#include "scheduler/kv/block_manager.h"\n' + function("Step", 50))
            write(root, "scheduler/kv/block_manager.h", "#pragma once\n")
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_forbidden_arrows_fail(self):
        arrows = [("scheduler/kv/block_manager.h", "scheduler/engine/sequence.h"),
                  ("scheduler/server_main.cc", "worker/comm/collective_communicator.h"),
                  ("worker/worker_service.cc", "scheduler/workers/worker_group.h"),
                  ("scheduler/engine/engine.cc", "tests/fakes/in_process_worker_group.h"),
                  ("worker/worker_main.cc", "text/tokenizer.h")]
        for source, target in arrows:
            with self.subTest(source=source, target=target), \
                    tempfile.TemporaryDirectory() as root:
                write(root, source, '#include "%s"\n' % target)
                result = check(root)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(source, result.stdout)

    def test_long_function_fails_outside_tests_only(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/engine/engine.cc", function("Step", 70))
            write(root, "scheduler/engine/engine_test.cc", function("TestBody", 70))
            result = check(root)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("Step is", result.stdout)
            self.assertNotIn("TestBody", result.stdout)


if __name__ == "__main__":
    unittest.main()
