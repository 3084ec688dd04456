"""pagoda-worker --metrics-port, as a user starts it: the process serves
/metrics on a port given, on one the OS picks (-1), beside a unix: --listen,
and on --metrics-host; a busy port is one line that says "in use" and exit
1. (worker_metrics_test covers the counts in-process.)"""
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pagoda_harness as h  # noqa: E402


class Worker:
    """pagoda-worker with a secret file; its stderr kept in a file."""

    def __init__(self, tmp, *args):
        secret = os.path.join(tmp, "secret")
        with open(secret, "w") as f:
            f.write("worker-metrics-test-secret-0123456789abcdef")
        os.chmod(secret, 0o600)
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [h.binary("pagoda-worker"), "--secret-file", secret, *args],
            stdout=subprocess.PIPE, stderr=self.stderr, text=True)

    def wait_listening(self, timeout=30):
        """True once the worker printed its endpoint (metrics started before)."""
        fd = self.process.stdout.fileno()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                return "PAGODA_WORKER_LISTENING" in self.process.stdout.readline()
        return False

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read()

    def metrics_address(self):
        m = re.search(r"metrics on (\S+):(\d+)", self.log())
        return (m.group(1), int(m.group(2))) if m else (None, None)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(timeout=30)
        self.process.stdout.close()
        return code


def scrape(port):
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


class WorkerMetricsProcessTest(unittest.TestCase):

    def serve_and_scrape(self, *args, rank="0", host="127.0.0.1"):
        with tempfile.TemporaryDirectory() as tmp:
            worker = Worker(tmp, "--rank", rank, *[a.replace("TMP", tmp) for a in args])
            try:
                self.assertTrue(worker.wait_listening(), worker.log())
                bound_host, port = worker.metrics_address()
                self.assertEqual(bound_host, host, worker.log())
                self.assertIn(f'pagoda_worker_refused_calls_total{{rank="{rank}"}} 0',
                              scrape(port))
            finally:
                self.assertEqual(worker.stop(), 0, worker.log())
            return port

    def test_a_given_port(self):
        port = h.free_port()
        self.assertEqual(self.serve_and_scrape("--metrics-port", str(port)), port)

    def test_a_port_the_os_picks(self):
        self.assertGreater(self.serve_and_scrape("--metrics-port", "-1", rank="3"), 0)

    def test_beside_a_unix_socket(self):
        self.serve_and_scrape("--listen", "unix:TMP/worker.sock", "--metrics-port", "-1")

    def test_on_the_metrics_host(self):
        self.serve_and_scrape("--metrics-host", "0.0.0.0", "--metrics-port", "-1",
                              host="0.0.0.0")

    def test_a_busy_port_is_one_line_that_says_in_use(self):
        with socket.socket() as busy, tempfile.TemporaryDirectory() as tmp:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            worker = Worker(tmp, "--metrics-port", str(port))
            self.assertEqual(worker.process.wait(timeout=30), 1)
            worker.process.stdout.close()
            errors = [line for line in worker.log().splitlines() if line.startswith("E")]
            self.assertEqual(len(errors), 1, worker.log())
            self.assertIn(f"127.0.0.1:{port}", errors[0])
            self.assertIn("in use", errors[0])
            self.assertNotIn("CivetServer", worker.log())


if __name__ == "__main__":
    unittest.main()
