"""vLLM's metric names, for the inference gateway's endpoint picker and
production-stack's router: on by default with the names, types, units and
model_name label vLLM uses; tracking pagoda's own gauges under load;
--no-vllm-metric-names turns them off."""
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

# name -> (Prometheus type, the pagoda_* series it mirrors or None).
VLLM = {
    "vllm:num_requests_running": ("gauge", "pagoda_num_requests_running"),
    "vllm:num_requests_waiting": ("gauge", "pagoda_num_requests_waiting"),
    "vllm:kv_cache_usage_perc": ("gauge", "pagoda_gpu_cache_usage_perc"),
    "vllm:gpu_cache_usage_perc": ("gauge", "pagoda_gpu_cache_usage_perc"),
    "vllm:gpu_prefix_cache_hits_total": ("counter", None),
    "vllm:gpu_prefix_cache_queries_total": ("counter", None),
    "vllm:cache_config_info": ("gauge", None),
}


def samples(text):
    """[(name, {label: value}, value)] of every sample line."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([^{ ]+)(?:\{(.*)\})? (\S+)$', line)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def one(text, name):
    found = [(labels, value) for n, labels, value in samples(text) if n == name]
    assert len(found) == 1, (name, found)
    return found[0]


class VllmMetricNamesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = h.make_model(os.path.join(cls.tmp.name, "model"))
        cls.server = h.Server(cls.model, "--metrics-port", "-1", "--served-model-name", "tiny",
                              "--num-gpu-blocks-override", "256", "--block-size", "8",
                              "--max-num-seqs", "2").start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    def scrape(self):
        return h.scrape(self.server.metrics_port)[1]

    def generate(self, token_ids, max_tokens):
        return subprocess.Popen([h.binary("pagoda-cli"), "--server", self.server.address,
                                 "generate", "--token-ids", token_ids, "--max-tokens",
                                 str(max_tokens), "--ignore-eos"], stdout=subprocess.DEVNULL)

    def test_names_types_units_and_labels(self):
        text = self.scrape()
        for name, (kind, _) in VLLM.items():
            family = name[:-len("_total")] if kind == "counter" else name
            self.assertRegex(text, rf"# TYPE {re.escape(family if kind == 'gauge' else name)} "
                             rf"{kind}\n", name)
            labels, _ = one(text, name)
            self.assertEqual(labels["model_name"], "tiny", name)
        labels, value = one(text, "vllm:cache_config_info")
        self.assertEqual(value, 1)
        self.assertEqual(labels["block_size"], "8")
        self.assertEqual(labels["num_gpu_blocks"], "256")
        # Fractions, not percentages: idle is 0 of 1.
        self.assertEqual(one(text, "vllm:kv_cache_usage_perc")[1], 0)

    def test_gauges_track_the_engine_under_load(self):
        # Six long requests on two sequence slots: two run, four wait. Two
        # fit the 256 blocks of 8 together (9 + 600 tokens: 77 blocks each),
        # so the pair runs to its end without preempting each other; 600
        # tokens keep the first pair running long after a loaded host has
        # started the other four processes.
        procs = [self.generate("1,2,3,4,5,6,7,8,9", 600) for _ in range(6)]
        seen_waiting = seen_usage = False
        deadline = time.time() + 60
        while time.time() < deadline and any(p.poll() is None for p in procs):
            text = self.scrape()
            for name, (_, mirror) in VLLM.items():
                if mirror is not None:
                    self.assertEqual(one(text, name)[1], one(text, mirror)[1], name)
            waiting = one(text, "vllm:num_requests_waiting")[1]
            running = one(text, "vllm:num_requests_running")[1]
            usage = one(text, "vllm:kv_cache_usage_perc")[1]
            self.assertLessEqual(running, 2)
            self.assertTrue(0 <= usage <= 1, usage)
            seen_waiting |= waiting > 0 and running == 2
            seen_usage |= usage > 0
        for proc in procs:
            self.assertEqual(proc.wait(timeout=120), 0)
        self.assertTrue(seen_waiting, "never saw requests waiting behind a full batch")
        self.assertTrue(seen_usage, "never saw KV cache usage above 0")
        # The same prompt six times: the prefix cache answered, in tokens.
        text = self.scrape()
        hits = one(text, "vllm:gpu_prefix_cache_hits_total")[1]
        queries = one(text, "vllm:gpu_prefix_cache_queries_total")[1]
        self.assertGreaterEqual(queries, 6 * 9)
        self.assertGreater(hits, 0)
        self.assertEqual(hits % 8, 0)  # Whole blocks of 8 tokens.
        self.assertEqual(hits, h.scrape(self.server.metrics_port)[0][
            "pagoda_prefix_cache_hits_total"])

    def test_no_vllm_metric_names_turns_them_off(self):
        with h.Server(self.model, "--metrics-port", "-1", "--no-vllm-metric-names") as server:
            _, text = h.scrape(server.metrics_port)
            self.assertNotIn("vllm:", text)
            self.assertIn("pagoda_num_requests_running", text)


if __name__ == "__main__":
    unittest.main()
