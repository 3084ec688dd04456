"""scripts/check_layout.py fails on a forbidden arrow, a long function, a
benchmark or test helper in a product folder, a long product file, a flag
read outside the server's or the worker's flags file, a header without a
leading comment and an include cycle in a room, and passes a tree that has
none of them (so the layout_check test can fail)."""
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


def lines(count, first="// A file.\n"):
    """A source file of exactly `count` lines, no function in it."""
    return first + "// line\n" * (count - 1)


class CheckLayoutTest(unittest.TestCase):

    def test_clean_tree_passes(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/engine/engine.cc",
                  '#include "scheduler/kv/block_manager.h"\n' + function("Step", 50))
            write(root, "scheduler/kv/block_manager.h", "#pragma once\n// Blocks.\n")
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_forbidden_arrows_fail(self):
        arrows = [("scheduler/kv/block_manager.h", "scheduler/engine/sequence.h"),
                  ("scheduler/server_main.cc", "worker/comm/collective_communicator.h"),
                  ("worker/worker_service.cc", "scheduler/workers/worker_group.h"),
                  ("scheduler/engine/engine.cc", "tests/fakes/in_process_worker_group.h"),
                  ("worker/worker_main.cc", "text/tokenizer.h"),
                  ("scheduler/api/frontend.cc", "scheduler/config/server_config.h"),
                  ("scheduler/engine/engine.cc", "scheduler/startup/serving.h")]
        for source, target in arrows:
            with self.subTest(source=source, target=target), \
                    tempfile.TemporaryDirectory() as root:
                write(root, source, '#include "%s"\n' % target)
                result = check(root)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(source, result.stdout)

    def test_a_flag_read_outside_the_server_config_fails(self):
        for path, text in [("scheduler/api/frontend.cc", "int p = absl::GetFlag(FLAGS_port);\n"),
                           ("scheduler/startup/serving.cc", "ABSL_FLAG(int, port, 1, \"p\");\n")]:
            with self.subTest(path=path), tempfile.TemporaryDirectory() as root:
                write(root, path, text)
                result = check(root)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(f"{path}: defines or reads a flag", result.stdout)
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/config/server_flags.cc",
                  "ABSL_FLAG(int, port, 1, \"p\");\nint P() { return absl::GetFlag(FLAGS_port); }\n")
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_a_flag_read_outside_the_worker_flags_fails(self):
        for path, text in [("worker/worker_process.cc", "int r = absl::GetFlag(FLAGS_rank);\n"),
                           ("worker/cpu/cpu_backend.cc", "ABSL_FLAG(int, threads, 1, \"t\");\n")]:
            with self.subTest(path=path), tempfile.TemporaryDirectory() as root:
                write(root, path, text)
                result = check(root)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(f"{path}: defines or reads a flag (only worker/worker_flags.cc",
                              result.stdout)
        with tempfile.TemporaryDirectory() as root:
            write(root, "worker/worker_flags.cc",
                  "ABSL_FLAG(int, rank, 0, \"r\");\nint R() { return absl::GetFlag(FLAGS_rank); }\n")
            write(root, "worker/worker_flags_test.cc", "int r = absl::GetFlag(FLAGS_rank);\n")
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_header_without_leading_comment_fails(self):
        bare = ("#ifndef PAGODA_X_H_\n#define PAGODA_X_H_\n\n#include <string>\n"
                "// Too late: a comment on a declaration.\nint X();\n#endif\n")
        for path in ["worker/cpu/simd.h", "scheduler/kv/block_pool.h", "kernels/ops/dispatch.cuh",
                     "common/empty.h"]:
            with self.subTest(path=path), tempfile.TemporaryDirectory() as root:
                write(root, path, "" if path == "common/empty.h" else bare)
                result = check(root)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(f"{path}: no leading comment", result.stdout)
        with tempfile.TemporaryDirectory() as root:
            write(root, "worker/cpu/simd.h", "#ifndef PAGODA_X_H_\n#define PAGODA_X_H_\n\n"
                  "// Vector loops.\n#include <string>\n#endif\n")
            write(root, "text/utf8.h", "#pragma once\n/* UTF-8 decoding. */\n")
            write(root, "worker/model.pb.h", "// Generated by protoc. DO NOT EDIT!\n")
            write(root, "worker/gen.pb.h", "#include <x>\n// Generated by protoc. DO NOT EDIT!\n")
            write(root, "worker/cpu/panel_linear.cc", "#include <string>\n")  # Not a header.
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_long_function_fails_outside_tests_only(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/engine/engine.cc", function("Step", 70))
            write(root, "scheduler/engine/engine_test.cc", function("TestBody", 70))
            result = check(root)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("Step is", result.stdout)
            self.assertNotIn("TestBody", result.stdout)

    def test_benchmark_in_product_folder_fails(self):
        for path in ["worker/cpu/bench_linear.cc", "scheduler/sim/scheduler_bench.cc",
                     "worker/cpu/machine_floor.h", "kernels/attention/bench_sdpa_baseline.py",
                     "scheduler/bench_mixed.h"]:
            with self.subTest(path=path), tempfile.TemporaryDirectory() as root:
                write(root, path, "// A benchmark.\n")
                result = check(root)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(path + ": a benchmark in a product folder", result.stdout)

    def test_test_helper_in_product_folder_fails(self):
        for path in ["kernels/attention/attention_test_util.h", "kernels/ops/testing/cuda_test_util.cc",
                     "scheduler/constraints/testing/mask_check.h", "worker/step_batch_test_util.h"]:
            with self.subTest(path=path), tempfile.TemporaryDirectory() as root:
                write(root, path, "// A test helper.\n")
                result = check(root)
                self.assertEqual(result.returncode, 1, result.stdout)
                self.assertIn(path + ": a test helper in a product folder", result.stdout)

    def test_benchmarks_and_helpers_pass_in_bench_and_tests(self):
        with tempfile.TemporaryDirectory() as root:
            for path in ["bench/cpu/bench_linear.cc", "bench/cpu/machine_floor.h",
                         "bench/sim/scheduler_bench.cc", "tests/kernels/attention_test_util.h",
                         "tests/support/step_batch_test_util.h"]:
                write(root, path, "// Fine here.\n")
            write(root, "worker/cpu/attention_test.cc",
                  '#include "tests/support/step_batch_test_util.h"\n')
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_product_code_including_bench_fails(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/engine/engine.cc", '#include "bench/sim/trace.h"\n')
            result = check(root)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("scheduler/engine/engine.cc: product code includes benchmark code",
                          result.stdout)

    def test_long_product_file_fails(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/engine/short.cc", lines(600))
            write(root, "scheduler/engine/long.cc", lines(601))
            write(root, "worker/cpu/long.h", lines(700))
            result = check(root)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("scheduler/engine/long.cc: 601 lines (at most 600", result.stdout)
            self.assertIn("worker/cpu/long.h: 700 lines", result.stdout)
            self.assertNotIn("short.cc", result.stdout)

    def test_long_kernel_test_and_generated_files_pass(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "kernels/attention/decode_attention.cu", lines(900))
            write(root, "kernels/ops/dispatch.cuh", lines(900))
            write(root, "scheduler/engine/scheduler_test.cc", lines(900))
            write(root, "worker/model.pb.h", lines(900, "// Generated by protoc. DO NOT EDIT!\n"))
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)

    def test_include_cycle_in_a_room_fails(self):
        # The .cc of each includes the other's header (issue 43's
        # request_validation <-> logits_processing_validation).
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/api/request_validation.h", "// V.\n")
            write(root, "scheduler/api/request_validation.cc",
                  '#include "scheduler/api/logits_processing_validation.h"\n')
            write(root, "scheduler/api/logits_processing_validation.h", "// L.\n")
            write(root, "scheduler/api/logits_processing_validation.cc",
                  '#include "scheduler/api/request_validation.h"\n')
            result = check(root)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("include cycle in scheduler/api/: logits_processing_validation -> "
                          "request_validation -> logits_processing_validation", result.stdout)
        # A longer loop, through headers only.
        with tempfile.TemporaryDirectory() as root:
            write(root, "scheduler/api/a.h", '#include "scheduler/api/b.h"\n')
            write(root, "scheduler/api/b.h", '#include "scheduler/api/c.h"\n')
            write(root, "scheduler/api/c.h", '#include "scheduler/api/a.h"\n')
            result = check(root)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("include cycle in scheduler/api/: a -> b -> c -> a", result.stdout)

    def test_arrows_one_way_and_across_rooms_pass(self):
        with tempfile.TemporaryDirectory() as root:
            # One way inside a room; a file including its own header; a
            # loop through two rooms (that is the forbidden-arrow rule's).
            write(root, "scheduler/api/request_validation.h",
                  '#include "scheduler/api/model_limits.h"\n')
            write(root, "scheduler/api/request_validation.cc",
                  '#include "scheduler/api/request_validation.h"\n'
                  '#include "scheduler/api/logits_processing_validation.h"\n')
            write(root, "scheduler/api/logits_processing_validation.h",
                  '#include "scheduler/api/model_limits.h"\n')
            write(root, "scheduler/api/logits_processing_validation.cc",
                  '#include "scheduler/api/logits_processing_validation.h"\n')
            write(root, "scheduler/api/model_limits.h", "// M.\n")
            write(root, "text/x.h", '#include "common/y.h"\n')
            write(root, "common/y.cc", '#include "text/x.h"\n')
            write(root, "common/y.h", "// Y.\n")
            result = check(root)
            self.assertNotIn("include cycle", result.stdout)

    def test_allowed_cycle_that_is_gone_must_leave_the_list(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "text/tokenizer.h", "// T.\n")
            write(root, "text/tokenizer.cc", '#include "text/hf_tokenizer.h"\n')
            write(root, "text/hf_tokenizer.h", "// H.\n")
            result = check(root)
            self.assertEqual(result.returncode, 1, result.stdout)
            self.assertIn("hf_tokenizer -> tokenizer -> hf_tokenizer: gone now: remove it from "
                          "CYCLES_ALLOWED", result.stdout)
            write(root, "text/hf_tokenizer.cc", '#include "text/tokenizer.h"\n')
            result = check(root)
            self.assertEqual(result.returncode, 0, result.stdout)


if __name__ == "__main__":
    unittest.main()
