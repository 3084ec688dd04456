"""A restart right after SIGTERM binds the same ports: the gRPC, HTTP and
metrics ports of a server that just served (so its side of those
connections may sit in TIME_WAIT) are free for the next server as soon as
the first has exited, three times in a row."""
import json
import os
import sys
import tempfile
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402


def complete(http_port):
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v1/completions",
        data=json.dumps({"prompt": "hello", "max_tokens": 4}).encode(),
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, json.load(response)


class RestartTest(unittest.TestCase):

    def test_a_restart_after_sigterm_binds_the_same_ports(self):
        ports = [h.free_port() for _ in range(3)]
        with tempfile.TemporaryDirectory() as tmp:
            model = h.make_model(os.path.join(tmp, "model"))
            for attempt in range(3):
                with self.subTest(attempt=attempt):
                    server = h.Server(model, "--port", str(ports[0]), "--http-port", str(ports[1]),
                                      "--metrics-port", str(ports[2]))
                    try:
                        server.start()
                        self.assertEqual((server.port, server.http_port, server.metrics_port),
                                         tuple(ports))
                        status, body = complete(server.http_port)
                        self.assertEqual(status, 200, body)
                        h.scrape(server.metrics_port)
                    finally:
                        log = server.stderr()
                        # SIGTERM, then the next start at once.
                        self.assertEqual(server.stop(), 0, log)


if __name__ == "__main__":
    unittest.main()
