"""Prometheus gauges tell the truth while idle, and TPOT counts tokens."""
import os
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

IDLE_ZERO = ["pagoda_num_requests_running", "pagoda_num_requests_waiting",
             "pagoda_num_requests_swapped", "pagoda_batch_size",
             "pagoda_kv_token_utilization_perc", "pagoda_gpu_cache_usage_perc"]


class IdleGaugesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # 1,024 positions (the 64 blocks of 16 hold one such sequence): the
        # stream cut off by its deadline below is then 1,000 tokens long.
        model = h.make_model(os.path.join(cls.tmp.name, "model"), "--max-position-embeddings",
                             "1024")
        cls.server = h.Server(model, "--metrics-port", "-1", "--num-gpu-blocks-override",
                              "64").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def generate(self, *args):
        return subprocess.run([h.binary("pagoda-cli"), "--server", self.server.address,
                               "generate", *args], capture_output=True, text=True, timeout=60)

    def assert_idle(self):
        # The engine publishes its state right after the last step; allow it
        # a moment to get there.
        deadline = time.time() + 5
        while True:
            values, _ = h.scrape(self.server.metrics_port)
            idle = all(values[name] == 0 for name in IDLE_ZERO) and (
                values["pagoda_gpu_blocks_free"] == values["pagoda_gpu_blocks"])
            if idle or time.time() > deadline:
                break
            time.sleep(0.05)
        for name in IDLE_ZERO:
            self.assertEqual(values[name], 0, name)
        self.assertEqual(values["pagoda_gpu_blocks_free"], 64)
        self.assertEqual(values["pagoda_gpu_blocks"], 64)
        self.assertEqual(values["pagoda_gpu_blocks_total"], 64)  # Deprecated alias.

    def test_gauges_return_to_idle_after_requests_and_a_cancelled_stream(self):
        # Busy: several concurrent long requests.
        procs = [subprocess.Popen([h.binary("pagoda-cli"), "--server", self.server.address,
                                   "generate", "--token-ids", "1,5,9", "--max-tokens", "300",
                                   "--ignore-eos"], stdout=subprocess.DEVNULL)
                 for _ in range(4)]
        saw_busy = False
        while not saw_busy and any(proc.poll() is None for proc in procs):
            values, _ = h.scrape(self.server.metrics_port)
            saw_busy = values["pagoda_batch_size"] > 0 and values["pagoda_gpu_blocks_free"] < 64
        for proc in procs:
            self.assertEqual(proc.wait(timeout=120), 0)
        self.assertTrue(saw_busy, "never saw the server busy (batch size > 0, blocks in use)")
        self.assert_idle()

        # A stream cut off by its deadline mid-generation (a cancelled call);
        # 20 ms, since the optimized CPU worker can finish the tiny model's whole
        # context quickly (512 positions took 40 ms; a 100 ms deadline let such
        # a stream succeed).
        result = self.generate("--token-ids", "1,5,9", "--max-tokens", "1000", "--ignore-eos",
                               "--stream", "--timeout", "0.02")
        self.assertEqual(result.returncode, 1)
        self.assertIn("DEADLINE_EXCEEDED", result.stderr)
        self.assert_idle()

    def test_time_per_output_token_is_observed_once_per_token(self):
        self.assert_idle()  # Nothing left over from another test.
        before, _ = h.scrape(self.server.metrics_port)
        result = self.generate("--token-ids", "1,5,9", "--max-tokens", "12", "--ignore-eos")
        self.assertEqual(result.returncode, 0, result.stderr)

        def count(values, name):
            return sum(v for k, v in values.items() if k.startswith(name + "_count"))

        # The engine records the finished request just after answering it.
        deadline = time.time() + 5
        while True:
            after, _ = h.scrape(self.server.metrics_port)
            if (count(after, "pagoda_time_to_first_token_seconds") >
                    count(before, "pagoda_time_to_first_token_seconds") or time.time() > deadline):
                break
            time.sleep(0.05)

        # 12 tokens: 11 gaps after the first, one observation each.
        self.assertEqual(count(after, "pagoda_time_per_output_token_seconds") -
                         count(before, "pagoda_time_per_output_token_seconds"), 11)
        self.assertEqual(count(after, "pagoda_time_to_first_token_seconds") -
                         count(before, "pagoda_time_to_first_token_seconds"), 1)


    def finished(self, reason):
        _, text = h.scrape(self.server.metrics_port)
        total = 0.0
        for line in text.splitlines():
            if line.startswith("pagoda_request_success_total{") and \
                    f'finished_reason="{reason}"' in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def test_a_stop_string_finish_is_counted_as_stop(self):
        self.assert_idle()
        free = self.generate("--prompt", "hello", "--max-tokens", "24", "--ignore-eos")
        self.assertEqual(free.returncode, 0, free.stderr)
        text = free.stdout.split("\nfinish_reason:")[0]
        stop = text[len(text) // 2:len(text) // 2 + 2]
        self.assertTrue(stop.strip(), f"no stop string to take from {text!r}")
        stops, aborts = self.finished("stop"), self.finished("abort")
        cut = self.generate("--prompt", "hello", "--max-tokens", "24", "--ignore-eos",
                            "--stop", stop)
        self.assertEqual(cut.returncode, 0, cut.stderr)
        self.assertIn("FINISH_REASON_STOP", cut.stdout)
        deadline = time.time() + 5  # The engine records the end just after answering.
        while self.finished("stop") == stops and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.finished("stop"), stops + 1)
        self.assertEqual(self.finished("abort"), aborts)

    def test_promtool_finds_nothing_but_the_deprecated_and_vllm_names(self):
        _, text = h.scrape(self.server.metrics_port)
        result = subprocess.run(["promtool", "check", "metrics"], input=text,
                                capture_output=True, text=True, timeout=30)
        problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        # The deprecated aliases' "_total", and the colon of vLLM's names
        # (which promtool keeps for recording rules; the gateway reads them
        # as vLLM spells them).
        expected = ("pagoda_gpu_blocks_total", "pagoda_cpu_blocks_total",
                    "pagoda_iteration_tokens_total", "vllm:")
        unexpected = [p for p in problems if not p.lstrip("- ").startswith(expected) and
                      "should not contain ':'" not in p]
        self.assertEqual(unexpected, [], "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
