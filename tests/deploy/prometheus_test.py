"""A real Prometheus (Debian's) scrapes a real pagoda-server under load; every
Grafana dashboard query and every alert rule evaluates without error, every
metric a dashboard query names is one the server exports, and the batch-size,
free-block, token-rate, prefix-cache and error queries return data."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

DEPLOY = os.path.join(h.REPO, "deploy")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
# Long enough to fill whole KV blocks, which are what the prefix cache shares.
SHARED_PROMPT = "the quick brown fox jumps over the lazy dog " * 8
# A metric name in a PromQL expression.
METRIC_NAME = re.compile(r"\b(?:pagoda_|vllm:)[A-Za-z0-9_:]*")


def dashboard_panels():
    with open(os.path.join(DEPLOY, "grafana", "pagoda-dashboard.json")) as f:
        return json.load(f)["panels"]


def dashboard_queries():
    for panel in dashboard_panels():
        for target in panel["targets"]:
            # Grafana's variables, as Grafana would expand them.
            yield panel["title"], target["expr"].replace("$model", ".*").replace(
                "$__rate_interval", "15s")


class PrometheusTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # 8,192 positions, so that the abandoned stream below is still
        # generating when its client gives up (512 took 40 ms to the end).
        model = h.make_model(os.path.join(cls.tmp.name, "model"), "--max-position-embeddings",
                             "8192")
        # Speculation on, so that the acceptance panel's counters exist and
        # fill (a random tiny model's greedy output soon repeats itself).
        cls.server = h.Server(model, "--metrics-port", "-1", "--http-port", "-1",
                              "--served-model-name", "tiny", "--speculative-config",
                              '{"method": "ngram", "num_speculative_tokens": 4, '
                              '"prompt_lookup_min": 1, "prompt_lookup_max": 4}').start()
        cls.prometheus_port = h.free_port()
        config = os.path.join(cls.tmp.name, "prometheus.yml")
        shutil.copy(os.path.join(DEPLOY, "prometheus", "pagoda-alerts.yml"), cls.tmp.name)
        with open(config, "w") as f:
            f.write(f"""global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [pagoda-alerts.yml]
scrape_configs:
  - job_name: pagoda
    static_configs: [{{targets: ["127.0.0.1:{cls.server.metrics_port}"]}}]
""")
        cls.prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(cls.tmp.name, 'data')}",
             f"--web.listen-address=127.0.0.1:{cls.prometheus_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.wait_for_scrapes(1)
        # Load: concurrent requests for a few seconds of scrapes. Long ones, so
        # that the engine is busy (batch size above 0) most of the time and not
        # only between client start-ups: the CPU worker runs 64 tokens of this
        # model in well under a scrape interval.
        cls.load_start = time.time()
        deadline = time.time() + 6
        while time.time() < deadline:
            procs = [subprocess.Popen([h.binary("pagoda-cli"), "--server", cls.server.address,
                                       "generate", "--prompt", "hello world", "--max-tokens",
                                       "400", "--ignore-eos"], stdout=subprocess.DEVNULL)
                     for _ in range(4)]
            cls.http_requests()
            for proc in procs:
                proc.wait(timeout=120)
        cls.load_end = time.time()
        cls.wait_for_scrapes(3)

    @classmethod
    def http_requests(cls):
        """What the error and prefix-cache panels show: completions that share
        a prompt, ones refused with 400, and a stream abandoned by its client
        (an abort)."""
        url = f"http://127.0.0.1:{cls.server.http_port}/v1/completions"
        for max_tokens in (4, 4, -1):
            request = urllib.request.Request(
                url, data=json.dumps({"prompt": SHARED_PROMPT, "max_tokens": max_tokens}).encode(),
                headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(request, timeout=60).read()
            except urllib.error.HTTPError as e:
                assert e.code == 400, e.code
        abandoned = subprocess.run(
            [h.binary("pagoda-cli"), "--server", cls.server.address, "generate", "--prompt", "hi",
             "--max-tokens", "8000", "--ignore-eos", "--timeout", "0.05"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert abandoned.returncode != 0

    @classmethod
    def tearDownClass(cls):
        cls.prometheus.terminate()
        cls.prometheus.wait(timeout=30)
        cls.server.stop()
        cls.tmp.cleanup()

    @classmethod
    def api(cls, path, **params):
        url = f"http://127.0.0.1:{cls.prometheus_port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)

    @classmethod
    def wait_for_scrapes(cls, count):
        deadline = time.time() + 90
        seen = 0
        while time.time() < deadline:
            try:
                result = cls.api("query", query="count_over_time(up[5m])")["data"]["result"]
                seen = int(float(result[0]["value"][1])) if result else 0
                if seen >= count and result and cls.api(
                        "query", query="up")["data"]["result"][0]["value"][1] == "1":
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"Prometheus scraped {seen} times")

    def query_range(self, expr):
        return self.api("query_range", query=expr, start=self.load_start - 2,
                        end=time.time(), step="1s")

    def test_every_dashboard_query_evaluates(self):
        queries = list(dashboard_queries())
        self.assertGreaterEqual(len(queries), 25)
        for title, expr in queries:
            with self.subTest(panel=title, expr=expr):
                response = self.query_range(expr)
                self.assertEqual(response["status"], "success", response)

    def max_value(self, expr):
        result = self.query_range(expr)["data"]["result"]
        self.assertTrue(result, f"no data for {expr}")
        return max(float(v) for series in result for _, v in series["values"])

    def test_busy_queries_return_data(self):
        queries = dict((title, expr) for title, expr in dashboard_queries())
        self.assertGreater(self.max_value(queries["Batch size (sequences per step)"]), 0)
        blocks = self.query_range('pagoda_gpu_blocks_free{model_name="tiny"}')["data"]["result"]
        self.assertTrue(blocks)
        tokens = [e for t, e in dashboard_queries() if t == "Tokens / s"]
        self.assertEqual(len(tokens), 2)
        for expr in tokens:
            self.assertGreater(self.max_value(expr), 0, expr)
        self.assertGreater(self.max_value(
            [e for t, e in dashboard_queries() if t == "Time per output token"][0]), 0)

    def test_dashboard_queries_name_only_exported_metrics(self):
        _, text = h.scrape(self.server.metrics_port)
        exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
                    if line and not line.startswith("#")}
        for title, expr in dashboard_queries():
            names = METRIC_NAME.findall(expr)
            with self.subTest(panel=title, expr=expr):
                self.assertTrue(names)
                self.assertLessEqual(set(names), exported)

    def test_worker_restart_prefix_cache_and_error_panels_show_the_load(self):
        queries = {}
        for title, expr in dashboard_queries():
            queries.setdefault(title, []).append(expr)
        # No worker failed: the restart panel has data, all of it zero.
        for expr in queries["Worker restarts"]:
            self.assertEqual(self.max_value(expr), 0, expr)
        self.assertGreater(self.max_value(queries["Prefix cache hit rate"][0]), 0)
        for expr in queries["Speculative decoding acceptance"]:
            self.assertGreater(self.max_value(expr), 0, expr)
        http_errors, ended_requests = queries["Errors / s"]
        self.assertIn("pagoda_http_requests_total", http_errors)
        result = self.query_range(http_errors)["data"]["result"]
        self.assertEqual({series["metric"]["status"] for series in result}, {"400"})
        self.assertGreater(self.max_value(http_errors), 0)
        result = self.query_range(ended_requests)["data"]["result"]
        self.assertIn("abort", {series["metric"]["finished_reason"] for series in result})
        self.assertGreater(self.max_value(ended_requests), 0)

    def test_every_alert_rule_evaluates_and_none_fires(self):
        deadline = time.time() + 30
        while True:
            groups = self.api("rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if all("lastEvaluation" in r and not r["lastEvaluation"].startswith("0001")
                   for r in rules):
                break
            if time.time() > deadline:
                self.fail(f"rules not all evaluated within 30 s: {rules}")
            time.sleep(0.5)
        self.assertEqual({r["name"] for r in rules},
                         {"PagodaServerDown", "PagodaServerAbsent", "PagodaWorkerDown",
                          "PagodaKvCacheExhausted", "PagodaQueueGrowing",
                          "PagodaWorkerRestartStorm"})
        for rule in rules:
            with self.subTest(rule=rule["name"]):
                self.assertEqual(rule["health"], "ok", rule)
                self.assertEqual(rule["state"], "inactive", rule)  # A healthy server.
                self.assertEqual(self.api("query", query=rule["query"])["status"], "success")
        # The worker-down alert's metric is there and says healthy.
        self.assertEqual(self.max_value("pagoda_healthy"), 1)


if __name__ == "__main__":
    unittest.main()
