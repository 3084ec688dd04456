"""What a new user meets first: --help/-h/--version on every binary, busy
ports, early flag validation, and pagoda-cli's output."""
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

BINARIES = ["pagoda-server", "pagoda-worker", "pagoda-cli"]


def run(argv, timeout=60):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


class HelpAndVersionTest(unittest.TestCase):

    def test_help_exits_zero_and_lists_dashed_flags(self):
        expected = {"pagoda-server": ["--max-num-seqs", "--metrics-port", "--tensor-parallel-size"],
                    "pagoda-worker": ["--listen", "--rank", "--parent-pid"],
                    "pagoda-cli": ["--max-tokens", "--token-ids", "--logprobs"]}
        for name in BINARIES:
            for flag in ("--help", "-h"):
                with self.subTest(binary=name, flag=flag):
                    result = run([h.binary(name), flag])
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.assertIn("usage: " + name, result.stdout)
                    for dashed in expected[name]:
                        self.assertIn(dashed, result.stdout)
                    self.assertNotRegex(result.stdout, r"--[a-z]+_[a-z_]+")
                    self.assertNotIn("--flagfile", result.stdout)  # Abseil's own flags.

    def test_version_names_the_real_build_type(self):
        build_type = os.environ["PAGODA_BUILD_TYPE"]  # What CMake was configured with.
        for name in BINARIES:
            with self.subTest(binary=name):
                result = run([h.binary(name), "--version"])
                self.assertEqual(result.returncode, 0)
                self.assertRegex(result.stdout.strip(),
                                 rf"^{name} \d+\.\d+\.\d+ \({re.escape(build_type)} build\)$")

    def test_unknown_flag_still_fails(self):
        result = run([h.binary("pagoda-worker"), "--no-such-flag"])
        self.assertEqual(result.returncode, 1)


class ServerTestBase(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = h.make_model(os.path.join(cls.tmp.name, "model"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class BusyPortAndValidationTest(ServerTestBase):

    def test_second_server_on_a_busy_port_exits_1(self):
        with h.Server(self.model) as first:
            result = run([h.binary("pagoda-server"), "--model", self.model, "--port",
                          str(first.port), "--cpu-kv-cache-space", "0.05"])
            self.assertEqual(result.returncode, 1, result.stdout)
            # One line naming the flag, found before any worker is spawned.
            self.assertIn(f"pagoda-server: --port {first.port}: 127.0.0.1:{first.port} is in use",
                          result.stderr)
            self.assertNotIn("PAGODA_WORKER_PIDS", result.stdout)
            # The first server still answers, alone.
            cli = run([h.binary("pagoda-cli"), "--server", first.address, "info"])
            self.assertEqual(cli.returncode, 0, cli.stderr)

    def test_second_worker_on_a_busy_port_exits_1(self):
        # A worker on a TCP port serves only callers holding its secret.
        secret_dir = tempfile.TemporaryDirectory()
        self.addCleanup(secret_dir.cleanup)
        secret = os.path.join(secret_dir.name, "secret")
        with open(secret, "w") as out:
            out.write(os.urandom(32).hex())
        os.chmod(secret, 0o600)
        worker = [h.binary("pagoda-worker"), "--secret-file", secret]
        first = subprocess.Popen(worker + ["--listen", "127.0.0.1:0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            port = int(first.stdout.readline().split()[1])
            result = run(worker + ["--listen", f"127.0.0.1:{port}"])
            self.assertEqual(result.returncode, 1)
            self.assertIn(f"cannot listen on 127.0.0.1:{port}", result.stderr)
        finally:
            first.terminate()
            first.wait(timeout=30)
            first.stdout.close()

    def assert_refused_before_workers(self, args, message):
        start = time.time()
        result = run([h.binary("pagoda-server"), "--model", self.model, "--port", "0", *args])
        self.assertEqual(result.returncode, 1)
        self.assertIn(message, result.stderr)
        self.assertNotIn("PAGODA_WORKER_PIDS", result.stdout)  # No worker was spawned.
        self.assertLess(time.time() - start, 10)

    def test_bad_device_is_refused_before_any_worker_starts(self):
        self.assert_refused_before_workers(["--device", "gpu"],
                                           "--device: expected cpu or cuda, got 'gpu'")

    def test_bad_http_io_threads_are_refused_before_any_worker_starts(self):
        for value in ("0", "-2", "65"):
            with self.subTest(value=value):
                self.assert_refused_before_workers(
                    ["--http-port", "-1", "--http-io-threads", value],
                    f"--http-io-threads {value} is out of range: expected 1 to 64")

    def test_bad_dtypes_are_refused_before_any_worker_starts(self):
        self.assert_refused_before_workers(
            ["--kv-cache-dtype", "int8"],
            '--kv-cache-dtype: unknown kv cache dtype "int8" (accepted: auto, float32, '
            'bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2)')
        self.assert_refused_before_workers(["--dtype", "fp8"], '--dtype: unknown dtype "fp8"')
        self.assert_refused_before_workers(["--kv-cache-dtype=half"], "--kv-cache-dtype")
        self.assert_refused_before_workers(["--dtype", "int4"], '--dtype: unknown dtype "int4"')

    def test_bad_worker_stall_timeout_is_refused_before_any_worker_starts(self):
        for value in ("0", "0.1", "-3", "nan", "7200"):
            with self.subTest(value=value):
                self.assert_refused_before_workers(
                    ["--worker-stall-timeout", value],
                    f"--worker-stall-timeout {value} is out of range: expected [0.5, 3600]")

    def test_bad_chunking_flags_are_refused_before_any_worker_starts(self):
        self.assert_refused_before_workers(
            ["--max-num-partial-prefills", "2", "--max-long-partial-prefills", "3"],
            "--max-long-partial-prefills 3 is out of range: expected 1 to 2")
        self.assert_refused_before_workers(
            ["--max-long-partial-prefills", "0"],
            "--max-long-partial-prefills 0 is out of range: expected 1 to 1")
        self.assert_refused_before_workers(
            ["--max-num-partial-prefills", "0"],
            "--max-num-partial-prefills 0 is out of range: expected 1 to 256")

    def test_bad_metrics_port_is_refused_before_any_worker_starts(self):
        self.assert_refused_before_workers(["--metrics-port", "70000"], "--metrics-port")
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            self.assert_refused_before_workers(["--metrics-port", str(port)],
                                               f"--metrics-port {port}: 127.0.0.1:{port} is in use")

    def test_model_path_that_is_a_file_is_not_a_directory(self):
        path = os.path.join(self.model, "config.json")
        self.assert_refused_before_workers(["--model", path], "is not a directory")


class CliOutputTest(ServerTestBase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = h.Server(cls.model).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        super().tearDownClass()

    def cli(self, *args):
        return run([h.binary("pagoda-cli"), "--server", self.server.address, "generate", *args])

    def test_errors_print_the_status_name(self):
        result = self.cli("--token-ids", "1,99999")
        self.assertEqual(result.returncode, 1)
        self.assertRegex(result.stderr, r"^pagoda-cli: error INVALID_ARGUMENT: ")

    def test_logprobs_are_printed(self):
        result = self.cli("--token-ids", "1,5,9", "--max-tokens", "4", "--ignore-eos",
                          "--logprobs", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        lines = [l for l in result.stdout.splitlines() if l.startswith("logprob: ")]
        self.assertEqual(len(lines), 4, result.stdout)
        for line in lines:
            self.assertRegex(line, r"^logprob: \d+ -?[\d.e-]+ top: \d+=\S+ \d+=\S+$")

    def test_unary_and_stream_print_the_same(self):
        for prompt in (["--token-ids", "1,5,9"], ["--prompt", "hello world"]):
            with self.subTest(prompt=prompt):
                args = [*prompt, "--max-tokens", "6", "--ignore-eos"]
                unary = self.cli(*args)
                stream = self.cli(*args, "--stream")
                self.assertEqual(unary.returncode, 0, unary.stderr)
                self.assertEqual(unary.stdout, stream.stdout)
                if prompt[0] == "--token-ids":
                    self.assertRegex(unary.stdout.splitlines()[0], r"^\d+( \d+){5}$")


class KvCacheDTypeTest(ServerTestBase):

    def test_bfloat16_cache_holds_twice_the_blocks_and_decodes_alike(self):
        # Same --cpu-kv-cache-space: a 2-byte cache halves bytes_per_block,
        # so the server reports twice the KV blocks (floor of twice, up to
        # one more), and an FP8 one twice bf16's again. Greedy tokens of
        # this model (top logits far apart) do not move with the cache's
        # rounding.
        seen = {}
        for kv in ("auto", "bfloat16", "fp8"):
            with h.Server(self.model, "--kv-cache-dtype", kv, "--metrics-port", "-1") as server:
                values, _ = h.scrape(server.metrics_port)
                result = run([h.binary("pagoda-cli"), "--server", server.address, "generate",
                              "--token-ids", "1,5,9,13,2,7", "--max-tokens", "12",
                              "--ignore-eos"])
                self.assertEqual(result.returncode, 0, result.stderr)
                seen[kv] = (int(values["pagoda_gpu_blocks_total"]),
                            result.stdout.splitlines()[0])
        f32_blocks, f32_tokens = seen["auto"]
        bf16_blocks, bf16_tokens = seen["bfloat16"]
        self.assertGreater(f32_blocks, 0)
        self.assertIn(bf16_blocks, (2 * f32_blocks, 2 * f32_blocks + 1))
        self.assertRegex(f32_tokens, r"^\d+( \d+){11}$")
        self.assertEqual(bf16_tokens, f32_tokens)
        fp8_blocks, fp8_tokens = seen["fp8"]
        self.assertIn(fp8_blocks, (2 * bf16_blocks, 2 * bf16_blocks + 1))
        self.assertEqual(fp8_tokens, f32_tokens)


if __name__ == "__main__":
    unittest.main()
