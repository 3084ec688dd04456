"""vLLM's production Grafana dashboard works on Pagoda unchanged: every
metric its panels query exists under vLLM's name and type, labelled
model_name, and counts what Pagoda's own families count."""
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402

# What the dashboard's panels read (vLLM's
# examples/observability/prometheus_grafana/grafana.json), with the type each
# must have for its queries (histogram_quantile over _bucket, rate over _sum,
# increase over counters) to work.
DASHBOARD = {
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:prompt_tokens_total": "counter",
    "vllm:generation_tokens_total": "counter",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_success_total": "counter",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
}
REQUESTS = 5
PROMPT = [1, 5, 9, 13, 17, 21, 25]
MAX_TOKENS = 12


def types(text):
    # prometheus-cpp declares a counter's family without its _total suffix.
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    return {**declared, **{f"{n}_total": t for n, t in declared.items() if t == "counter"}}


def value(text, series):
    """The sample of `series` (name plus its sorted labels but model_name)."""
    for line in text.splitlines():
        m = re.match(r'([^{ ]+)(?:\{(.*)\})? (\S+)$', line)
        if not m or line.startswith("#"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        model_name = labels.pop("model_name", None)
        if m.group(1).startswith("vllm:"):
            assert model_name == "tiny", line
        if (m.group(1), labels) == series:
            return float(m.group(3))
    raise AssertionError(f"no sample {series}")


class VllmDashboardTest(unittest.TestCase):

    def test_every_dashboard_metric_exists_and_counts_the_requests(self):
        with tempfile.TemporaryDirectory() as tmp:
            model = h.make_model(os.path.join(tmp, "model"))
            with h.Server(model, "--metrics-port", "-1", "--served-model-name", "tiny") as server:
                for _ in range(REQUESTS):
                    subprocess.run([h.binary("pagoda-cli"), "--server", server.address,
                                    "generate", "--token-ids", ",".join(map(str, PROMPT)),
                                    "--max-tokens", str(MAX_TOKENS), "--ignore-eos"],
                                   check=True, stdout=subprocess.DEVNULL, timeout=60)
                # The last request's records reach the metrics as it ends.
                h.wait_for(lambda: value(h.scrape(server.metrics_port)[1],
                                         ("vllm:e2e_request_latency_seconds_count", {}))
                           == REQUESTS, 10, "every request in the histograms")
                text = h.scrape(server.metrics_port)[1]
        declared = types(text)
        for name, kind in DASHBOARD.items():
            with self.subTest(metric=name):
                self.assertEqual(declared.get(name), kind)
        for name, kind in DASHBOARD.items():
            if kind == "histogram":
                with self.subTest(histogram=name):
                    count = value(text, (f"{name}_count", {}))
                    self.assertEqual(count, REQUESTS * (MAX_TOKENS - 1)
                                     if name == "vllm:inter_token_latency_seconds" else REQUESTS)
        self.assertEqual(value(text, ("vllm:request_success_total", {"finished_reason": "length"})),
                         REQUESTS)
        self.assertEqual(value(text, ("vllm:request_prompt_tokens_sum", {})),
                         REQUESTS * len(PROMPT))
        self.assertEqual(value(text, ("vllm:request_generation_tokens_sum", {})),
                         REQUESTS * MAX_TOKENS)
        self.assertEqual(value(text, ("vllm:request_max_num_generation_tokens_sum", {})),
                         REQUESTS * MAX_TOKENS)
        self.assertEqual(value(text, ("vllm:generation_tokens_total", {})),
                         value(text, ("pagoda_generation_tokens_total", {})))
        self.assertEqual(value(text, ("vllm:prompt_tokens_total", {})),
                         value(text, ("pagoda_prompt_tokens_total", {})))
        # TTFT splits into queue and prefill time.
        ttft = value(text, ("vllm:time_to_first_token_seconds_sum", {}))
        parts = (value(text, ("vllm:request_queue_time_seconds_sum", {})) +
                 value(text, ("vllm:request_prefill_time_seconds_sum", {})))
        self.assertAlmostEqual(parts, ttft, places=6)


if __name__ == "__main__":
    unittest.main()
