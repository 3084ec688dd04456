"""Completion ids never repeat across restarts: two starts of pagoda-server
with the same flags (the same --seed) answer their first /v1/completions
with different ids, though each is the start's request 0."""
import json
import os
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402


def first_completion_id(model):
    with h.Server(model, "--http-port", "-1") as server:
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.http_port}/v1/completions",
            data=json.dumps({"prompt": "hello", "max_tokens": 2}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["id"]


class CompletionIdsTest(unittest.TestCase):

    def test_two_starts_give_distinct_ids(self):
        with tempfile.TemporaryDirectory() as tmp:
            model = h.make_model(os.path.join(tmp, "model"))
            first, second = first_completion_id(model), first_completion_id(model)
        self.assertTrue(first.startswith("cmpl-req-0-"), first)
        self.assertTrue(second.startswith("cmpl-req-0-"), second)
        self.assertNotEqual(first, second)


if __name__ == "__main__":
    unittest.main()
